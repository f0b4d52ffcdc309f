// Package api is a node's public check API: the gRPC service
// ringlimit.v1.RateLimiter, its HTTP/JSON twin POST /v1/check, their
// decoding (a gRPC codec that lets a malformed request be answered with
// InvalidArgument naming the field, JSON that must be UTF-8), and the
// validation that turns each item into a check.Request. Items that name a
// rule of the node's rules file take their limit from it.
//
// A Server decides nothing itself: it hands the valid requests of a call
// to its Backend, the node's one path to its coordination core, and
// reports each answer as the wire spells it.
//
//	s := api.New(api.Config{Node: "n1", MaxKeyLen: 1024, MaxBatchItems: 1000,
//		MaxBodyBytes: 1 << 20}, backend, observer)
//	grpcSrv := grpc.NewServer(grpc.ForceServerCodecV2(api.Codec()))
//	s.Register(grpcSrv)                   // RateLimiter/Check
//	mux.Handle("POST /v1/check", s.HTTP()) // the JSON form
//	resp, err := s.Check(ctx, req)         // the embedding form
package api
