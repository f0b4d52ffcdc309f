package bucket

func newSmoothBursty(l Limit, now int64) Bucket             { return &stub{l} }
func decodeSmoothBursty(l Limit, r *reader) (Bucket, error) { return &stub{l}, nil }

func newSmoothWarmingUp(l Limit, now int64) Bucket             { return &stub{l} }
func decodeSmoothWarmingUp(l Limit, r *reader) (Bucket, error) { return &stub{l}, nil }
