package node

import (
	"herald/internal/host"
	"herald/internal/transport"
)

// rpcHandlers is what peers may call on this node: each part of the node
// registers its own calls.
func rpcHandlers(h *host.Host, r *relay, l *liveness, m *membership) transport.Handlers {
	var calls transport.Handlers
	// A replica installing a snapshot fetches the entries it needs; a
	// rebuilt one asks to be re-added.
	calls.Entries = h.ServeEntries
	calls.Readd = h.ServeReadd
	r.handle(&calls)
	l.handle(&calls)
	m.handle(&calls)
	return calls
}
