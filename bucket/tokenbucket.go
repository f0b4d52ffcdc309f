package bucket

func newTokenBucket(l Limit, now int64) Bucket             { return &stub{l} }
func decodeTokenBucket(l Limit, r *reader) (Bucket, error) { return &stub{l}, nil }
