package api

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"connectrpc.com/connect"

	"herald/internal/auth"
	heraldv1 "herald/proto/herald/v1"
)

// auditInterceptor writes an audit line for every call of an
// administration procedure (topics, dead letters and the cluster): who, what, on which
// topic, and how it ended; slog adds when. Attribute values are left out:
// they may hold secrets (signing_secret, a push endpoint's password).
func auditInterceptor(log *slog.Logger) connect.UnaryInterceptorFunc {
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			proc := req.Spec().Procedure
			if procedureScopes[proc] != auth.ScopeAdmin {
				return next(ctx, req)
			}
			resp, err := next(ctx, req)
			p := principalOf(ctx)
			attrs := []any{"who", p.String(), "remote", p.Remote, "action", procedureName(proc)}
			attrs = append(attrs, auditDetails(req.Any())...)
			if err != nil {
				attrs = append(attrs, "result", connect.CodeOf(err).String(), "err", err.Error())
			} else {
				attrs = append(attrs, "result", "ok")
			}
			log.LogAttrs(ctx, slog.LevelInfo, "audit", slog.Group("audit", attrs...))
			return resp, err
		}
	}
}

// auditDetails names the topic, the attributes and the events an
// administration request is about.
func auditDetails(msg any) []any {
	switch m := msg.(type) {
	case *heraldv1.CreateTopicRequest:
		return []any{"topic", m.Name, "attributes", slices.Sorted(maps.Keys(m.Attributes))}
	case *heraldv1.SetTopicAttributesRequest:
		return []any{"topic", m.Name, "attributes", slices.Sorted(maps.Keys(m.Attributes))}
	case *heraldv1.DeleteTopicRequest:
		return []any{"topic", m.Name}
	case *heraldv1.ListDeadLettersRequest:
		return []any{"topic", m.Topic}
	case *heraldv1.ReplayDeadLettersRequest:
		return []any{"topic", m.Topic, "ids", m.Ids}
	case *heraldv1.PurgeDeadLettersRequest:
		return []any{"topic", m.Topic, "ids", m.Ids}
	case *heraldv1.AddNodeRequest:
		return []any{"node", m.Id, "address", m.Address}
	case *heraldv1.RemoveNodeRequest:
		return []any{"node", m.Id}
	}
	return nil
}
