module herald

go 1.26.8

require (
	go.etcd.io/raft/v3 v3.7.0
	golang.org/x/sync v0.24.0
	google.golang.org/protobuf v1.36.11
)

require connectrpc.com/connect v1.21.1 // indirect
