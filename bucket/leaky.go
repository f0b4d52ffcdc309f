package bucket

func newLeakyMeter(l Limit, now int64) Bucket             { return &stub{l} }
func decodeLeakyMeter(l Limit, r *reader) (Bucket, error) { return &stub{l}, nil }

func newLeakyQueue(l Limit, now int64) Bucket             { return &stub{l} }
func decodeLeakyQueue(l Limit, r *reader) (Bucket, error) { return &stub{l}, nil }
