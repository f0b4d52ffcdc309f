package sync

import peerv1 "github.com/ringlimit/ringlimit/proto/ringlimit/peer/v1"

// envelopeOf returns a new envelope holding body. For the bodies sent per
// check (flushes, pushes, forwards and their answers) the envelope and its
// oneof wrapper share one allocation; other bodies use isBody.set.
func envelopeOf(body isBody) *peerv1.Envelope {
	switch b := body.(type) {
	case flushBody:
		x := &struct {
			e peerv1.Envelope
			w peerv1.Envelope_Flush
		}{w: peerv1.Envelope_Flush{Flush: b.Flush}}
		x.e.Body = &x.w
		return &x.e
	case flushAckBody:
		x := &struct {
			e peerv1.Envelope
			w peerv1.Envelope_FlushAck
		}{w: peerv1.Envelope_FlushAck{FlushAck: b.FlushAck}}
		x.e.Body = &x.w
		return &x.e
	case pushBody:
		x := &struct {
			e peerv1.Envelope
			w peerv1.Envelope_Push
		}{w: peerv1.Envelope_Push{Push: b.Push}}
		x.e.Body = &x.w
		return &x.e
	case forwardBody:
		x := &struct {
			e peerv1.Envelope
			w peerv1.Envelope_Forward
		}{w: peerv1.Envelope_Forward{Forward: b.Forward}}
		x.e.Body = &x.w
		return &x.e
	case forwardReplyBody:
		x := &struct {
			e peerv1.Envelope
			w peerv1.Envelope_ForwardReply
		}{w: peerv1.Envelope_ForwardReply{ForwardReply: b.ForwardReply}}
		x.e.Body = &x.w
		return &x.e
	}
	env := new(peerv1.Envelope)
	body.set(env)
	return env
}
