package bucket

func newFixedWindow(l Limit, now int64) Bucket             { return &stub{l} }
func decodeFixedWindow(l Limit, r *reader) (Bucket, error) { return &stub{l}, nil }
