package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ringlimit/ringlimit/check"
)

// HeaderLimit answers 431 to a request whose request line and headers take
// more than max bytes as sent (each header line "Key: value\r\n"). Go's
// server refuses them only past its own bound plus a read-buffer's slop (4
// KiB and more), so without this a 64 KiB limit refused from about 80 KiB.
func HeaderLimit(max int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
		for k, vs := range r.Header {
			for _, v := range vs {
				size += len(k) + 2 + len(v) + 2
			}
		}
		if r.Host != "" && r.Header.Get("Host") == "" {
			size += len("Host: ") + len(r.Host) + 2
		}
		if size > max {
			WriteError(w, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request headers: %d bytes, more than the maximum %d", size, max))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// HTTP returns the handler of POST /v1/check, the JSON form of
// RateLimiter/Check (docs/api.md), bound by Config.HTTPRulesOnly.
func (s *Server) HTTP() http.Handler { return http.HandlerFunc(s.httpCheck) }

func (s *Server) httpCheck(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			WriteError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q: want application/json", ct))
			return
		}
	} else {
		WriteError(w, http.StatusUnsupportedMediaType, "Content-Type missing: want application/json")
		return
	}
	var req JSONCheckRequest
	body, code, msg := readBody(w, r, s.cfg.MaxBodyBytes)
	if code == 0 {
		code, msg = decodeJSON(bytes.NewReader(body), &req)
	}
	if code != 0 {
		WriteError(w, code, msg)
		return
	}
	if err := s.checkBatch(len(req.Items)); err != nil {
		WriteError(w, http.StatusBadRequest, status.Convert(err).Message())
		return
	}
	items := make([]item, len(req.Items))
	for i := range req.Items {
		items[i] = fromJSON(&req.Items[i])
	}
	out := make([]check.Response, len(items))
	if err := s.decide(r.Context(), items, out, s.cfg.HTTPRulesOnly); err != nil {
		st := status.Convert(err)
		WriteError(w, httpStatus(st.Code()), st.Message())
		return
	}
	resp := JSONCheckResponse{Items: make([]JSONResult, len(out)), Node: s.cfg.Node}
	for i := range out {
		resp.Items[i] = toJSON(&out[i])
	}
	s.obs.Call(HTTP, len(items), time.Since(start))
	WriteJSON(w, http.StatusOK, resp)
}

// readBody reads r's body, at most limit bytes, and checks that it is UTF-8
// (encoding/json would silently replace invalid bytes, so that distinct
// binary keys would share a bucket). It returns the body, or the HTTP status
// and message of the failure: 413 over the limit, 408 when the client sends
// too slowly for the server's ReadTimeout, 400 otherwise.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, int, string) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var ne net.Error
	switch {
	case tooLarge(err):
		return nil, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body too large: more than %d bytes", limit)
	case errors.As(err, &ne) && ne.Timeout():
		return nil, http.StatusRequestTimeout, "reading the request body timed out"
	case err != nil:
		return nil, http.StatusBadRequest, "reading the request body: " + err.Error()
	}
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, size := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && size <= 1 {
				break
			}
			i += size
		}
		return nil, http.StatusBadRequest, fmt.Sprintf("malformed JSON: invalid UTF-8 at byte %d", i)
	}
	if i := loneSurrogate(body); i >= 0 {
		return nil, http.StatusBadRequest, fmt.Sprintf("malformed JSON: a lone UTF-16 surrogate escape at byte %d", i)
	}
	return body, 0, ""
}

// loneSurrogate returns the offset of the first \u escape in the JSON b
// that is half of a UTF-16 surrogate pair without its other half, or -1.
// encoding/json decodes each such escape as U+FFFD, so "\udc00" and
// "\udc01" would name one bucket (issue 16); they are refused instead.
// Backslashes occur in JSON only in strings, as escapes, so a scan of the
// escapes needs no parser.
func loneSurrogate(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if i+1 >= len(b) || b[i+1] != 'u' {
			i++ // an escape of one character: skip it
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok:
			return -1 // malformed: the decoder reports it
		case r >= 0xdc00 && r <= 0xdfff:
			return i
		case r >= 0xd800 && r <= 0xdbff:
			lo, ok := rune(0), false
			if i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
				lo, ok = hex4(b, i+8)
			}
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return i
			}
			i += 11
		default:
			i += 5
		}
	}
	return -1
}

// hex4 parses the four hexadecimal digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// decodeJSON reads exactly one JSON value into v, rejecting unknown fields
// and trailing data. It returns 0 or the HTTP status and message of the
// failure.
func decodeJSON(body io.Reader, v any) (int, string) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			if tooLarge(err2) {
				return http.StatusRequestEntityTooLarge, err2.Error()
			}
			return http.StatusBadRequest, "malformed JSON: unexpected data after the request object"
		}
		return 0, ""
	}
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case tooLarge(err):
		return http.StatusRequestEntityTooLarge, err.Error()
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return http.StatusBadRequest, fmt.Sprintf(`malformed JSON: the body must be an object {"items": [...]}, got a JSON %s`, typeErr.Value)
	case errors.As(err, &typeErr):
		return http.StatusBadRequest, fmt.Sprintf("malformed JSON: field %q: got a JSON %s, want %s", typeErr.Field, typeErr.Value, typeErr.Type)
	case errors.As(err, &syntaxErr):
		return http.StatusBadRequest, fmt.Sprintf("malformed JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, "malformed JSON: empty body"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, "malformed JSON: truncated body"
	default:
		// Unknown fields: `json: unknown field "x"`.
		return http.StatusBadRequest, "malformed JSON: " + err.Error()
	}
}

func tooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}

// httpStatus maps the gRPC code of a failed call to an HTTP status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unavailable, codes.Canceled:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// WriteError writes msg as the body of an error answer with the HTTP
// status code: {"error": msg}, the shape of every error of the HTTP API.
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, JSONError{Error: msg})
}

// WriteJSON writes v as JSON with the HTTP status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}
