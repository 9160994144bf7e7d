package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"herald/internal/auth"
	"herald/internal/protocol"
	"herald/proto/herald/v1/heraldv1connect"
)

// Every request but the health checks is checked against the route table
// below by one middleware around the whole handler, so that a route added
// to the mux without an entry is refused rather than left open.

// anyScope marks a route that any valid token may call: reading topics
// and their statistics, which every client needs.
const anyScope auth.Scope = "any"

// public marks a route that needs no token: health checks, which load
// balancers probe, and the dashboard's page and assets, which hold no data
// (its data comes from routes that need a token).
const public auth.Scope = "public"

// procedureScopes is the scope each HeraldService procedure needs. A
// procedure missing here needs admin (and TestEveryProcedureHasAScope
// fails).
var procedureScopes = map[string]auth.Scope{
	heraldv1connect.HeraldServiceCreateTopicProcedure:        auth.ScopeAdmin,
	heraldv1connect.HeraldServiceSetTopicAttributesProcedure: auth.ScopeAdmin,
	heraldv1connect.HeraldServiceDeleteTopicProcedure:        auth.ScopeAdmin,
	// Subscriptions are managed as topics are.
	heraldv1connect.HeraldServiceCreateSubscriptionProcedure:        auth.ScopeAdmin,
	heraldv1connect.HeraldServiceSetSubscriptionAttributesProcedure: auth.ScopeAdmin,
	heraldv1connect.HeraldServiceDeleteSubscriptionProcedure:        auth.ScopeAdmin,
	heraldv1connect.HeraldServiceEnableSubscriptionProcedure:        auth.ScopeAdmin,
	heraldv1connect.HeraldServiceDisableSubscriptionProcedure:       auth.ScopeAdmin,
	heraldv1connect.HeraldServiceSeekSubscriptionProcedure:          auth.ScopeAdmin,
	heraldv1connect.HeraldServiceGetSubscriptionProcedure:           anyScope,
	heraldv1connect.HeraldServiceListSubscriptionsProcedure:         anyScope,
	heraldv1connect.HeraldServiceListDeadLettersProcedure:           auth.ScopeAdmin,
	heraldv1connect.HeraldServiceReplayDeadLettersProcedure:         auth.ScopeAdmin,
	heraldv1connect.HeraldServicePurgeDeadLettersProcedure:          auth.ScopeAdmin,
	heraldv1connect.HeraldServiceClusterStatusProcedure:             auth.ScopeAdmin,
	heraldv1connect.HeraldServiceAddNodeProcedure:                   auth.ScopeAdmin,
	heraldv1connect.HeraldServiceRemoveNodeProcedure:                auth.ScopeAdmin,
	heraldv1connect.HeraldServiceRebalanceProcedure:                 auth.ScopeAdmin,
	heraldv1connect.HeraldServiceShardLeadersProcedure:              anyScope,
	heraldv1connect.HeraldServiceGetTopicProcedure:                  anyScope,
	heraldv1connect.HeraldServiceListTopicsProcedure:                anyScope,
	heraldv1connect.HeraldServiceTopicStatsProcedure:                anyScope,
	heraldv1connect.HeraldServicePublishProcedure:                   auth.ScopePublish,
	heraldv1connect.HeraldServicePublishStreamProcedure:             auth.ScopePublish,
	heraldv1connect.HeraldServiceReserveProcedure:                   auth.ScopePublish,
	heraldv1connect.HeraldServiceCommitProcedure:                    auth.ScopePublish,
	heraldv1connect.HeraldServiceAbortProcedure:                     auth.ScopePublish,
	heraldv1connect.HeraldServiceFetchProcedure:                     auth.ScopeConsume,
	heraldv1connect.HeraldServiceAckProcedure:                       auth.ScopeConsume,
	heraldv1connect.HeraldServiceNackProcedure:                      auth.ScopeConsume,
}

// snsPath is where the SNS-style API takes its form-encoded POSTs, and
// snsActionScopes the scope of each of its Actions. An Action missing
// here needs admin.
const snsPath = "/"

var snsActionScopes = map[string]auth.Scope{
	"CreateTopic":        auth.ScopeAdmin,
	"DeleteTopic":        auth.ScopeAdmin,
	"SetTopicAttributes": auth.ScopeAdmin,
	"ListTopics":         anyScope,
	"GetTopic":           anyScope,
	"GetTopicAttributes": anyScope,
	"Publish":            auth.ScopePublish,
	"PublishBatch":       auth.ScopePublish,

	"Subscribe":                 auth.ScopeAdmin,
	"Unsubscribe":               auth.ScopeAdmin,
	"SetSubscriptionAttributes": auth.ScopeAdmin,
	"ListSubscriptions":         anyScope,
	"ListSubscriptionsByTopic":  anyScope,
	"GetSubscriptionAttributes": anyScope,
	// The endpoint's receiver confirms a subscription with the token
	// herald sent it, and has no herald token: the token is its credential.
	"ConfirmSubscription": public,
}

// pathScopes are the scopes of the routes that are not procedures; a path
// ending in / covers everything under it.
var pathScopes = map[string]auth.Scope{
	"/healthz":                 public,
	"/readyz":                  public,
	"/metrics":                 anyScope, // public unless Options.MetricsNeedToken
	dashboardPath:              public,
	dashboardPath + "data/":    anyScope,
	s3IngestPath:               auth.ScopePublish,
	protocol.PublishStreamPath: auth.ScopePublish,
}

// s3IngestPath takes S3 event notifications (publish scope).
const s3IngestPath = "/s3/"

// scopeFor returns the scope request r needs and, for messages, what it
// calls.
func (a *authorizer) scopeFor(r *http.Request) (auth.Scope, string) {
	p := r.URL.Path
	if s, ok := procedureScopes[p]; ok {
		return s, procedureName(p)
	}
	if strings.HasPrefix(p, "/"+heraldv1connect.HeraldServiceName+"/") {
		return auth.ScopeAdmin, p
	}
	if p == snsPath && r.Method == http.MethodPost {
		action := r.FormValue("Action") // parsed once; the SNS handler reads the same form
		if s, ok := snsActionScopes[action]; ok {
			return s, "SNS " + action
		}
		return auth.ScopeAdmin, "SNS " + action
	}
	if p == snsPath {
		// GET / sends browsers to the dashboard, or says what the node
		// serves: it holds no data.
		return public, p
	}
	if p == "/metrics" && !a.metricsNeedToken {
		return public, p
	}
	if s, ok := pathScopes[p]; ok {
		return s, p
	}
	// The longest prefix decides: /dashboard/data/ needs a token although
	// /dashboard/ does not.
	need, longest := auth.ScopeAdmin, ""
	for prefix, s := range pathScopes {
		if strings.HasSuffix(prefix, "/") && strings.HasPrefix(p, prefix) && len(prefix) > len(longest) {
			need, longest = s, prefix
		}
	}
	return need, p
}

// procedureName returns the method name of a procedure.
func procedureName(procedure string) string {
	return strings.TrimPrefix(procedure, "/"+heraldv1connect.HeraldServiceName+"/")
}

// authorizer is the token check around the whole handler.
type authorizer struct {
	tokens           *auth.Store // nil: no tokens are configured, every request is allowed
	metricsNeedToken bool
	errors           *connect.ErrorWriter
	now              func() time.Time
	log              *slog.Logger // the audit log of the SNS API
}

type principalKey struct{}

// Principal is who made a request, for the audit log.
type Principal struct {
	Token  auth.Token // zero when no tokens are configured
	Remote string     // the client's address
}

// String names the principal without its secret.
func (p Principal) String() string {
	if p.Token.ID == "" {
		return "anonymous"
	}
	return p.Token.Name + " (token " + p.Token.ID + ")"
}

// principalOf returns who made the request of ctx.
func principalOf(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

func (a *authorizer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := Principal{Remote: r.RemoteAddr}
		need, what := a.scopeFor(r)
		tok, err := a.check(r, need, what)
		if err != nil {
			if err.Code() == connect.CodeUnauthenticated {
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
			}
			a.refuse(w, r, err.Code(), err.Message())
			return
		}
		p.Token = tok
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if a.tokens != nil && need != public {
			checked := r
			ctx = context.WithValue(ctx, tokenRecheckKey{}, func() *connect.Error { return a.recheck(checked) })
		}
		r = r.WithContext(ctx)
		if strings.HasPrefix(what, "SNS ") && need == auth.ScopeAdmin {
			// The SNS API administers topics outside the Connect
			// service, whose interceptor writes the other audit lines.
			sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(sw, r)
			a.auditSNS(r, p, what, sw.status)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// check returns the token of request r, which calls what, if it needs
// one and has scope need, or the refusal: unauthenticated (no token, or a
// malformed, unknown or expired one) or permission denied.
func (a *authorizer) check(r *http.Request, need auth.Scope, what string) (auth.Token, *connect.Error) {
	if need == public || a.tokens == nil {
		return auth.Token{}, nil
	}
	tok, err := a.tokens.Authenticate(bearer(r), a.now())
	if err != nil {
		msg := fmt.Sprintf("%s needs a token with the %s; %v", what, scopeWords(need), err)
		if errors.Is(err, auth.ErrMissing) || errors.Is(err, auth.ErrMalformed) || errors.Is(err, auth.ErrUnknown) {
			msg += "; create one with herald token create and pass it with --token or $HERALD_TOKEN"
		}
		return auth.Token{}, connect.NewError(connect.CodeUnauthenticated, errors.New(msg))
	}
	if need != anyScope && !tok.Has(need) {
		return auth.Token{}, connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s needs a token with the %s; token %s (%s) has %s", what, scopeWords(need), tok.ID, tok.Name, scopeList(tok.Scopes)))
	}
	return tok, nil
}

// recheck checks request r's token again, for a request that lasts (a
// publish stream): the token may have expired or been revoked since.
func (a *authorizer) recheck(r *http.Request) *connect.Error {
	need, what := a.scopeFor(r)
	_, err := a.check(r, need, what)
	return err
}

type tokenRecheckKey struct{}

// tokenRecheck returns the check of the token of the request of ctx again
// (authorizer.recheck), for a request that lasts; with no tokens to
// check, one that always passes.
func tokenRecheck(ctx context.Context) func() *connect.Error {
	if f, ok := ctx.Value(tokenRecheckKey{}).(func() *connect.Error); ok {
		return f
	}
	return func() *connect.Error { return nil }
}

// auditSNS writes the audit line of an SNS administration request: the
// topic (or subscription) and the names (not the values) of the attributes it sets.
func (a *authorizer) auditSNS(r *http.Request, p Principal, what string, status int) {
	topicName := r.PostFormValue("Name")
	if topicName == "" {
		topicName = r.PostFormValue("TopicArn")
	}
	if topicName == "" {
		topicName = r.PostFormValue("SubscriptionArn") // names its topic too
	}
	var attrs []string
	for k, v := range r.PostForm {
		if strings.HasPrefix(k, "Attributes.entry.") && strings.HasSuffix(k, ".key") && len(v) > 0 {
			attrs = append(attrs, v[0])
		}
	}
	if name := r.PostFormValue("AttributeName"); name != "" {
		attrs = append(attrs, name)
	}
	slices.Sort(attrs)
	result := "ok"
	if status >= 300 {
		result = strconv.Itoa(status) + " " + http.StatusText(status)
	}
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "audit", slog.Group("audit",
		"who", p.String(), "remote", p.Remote, "action", what, "topic", topicName, "attributes", attrs, "result", result))
}

// statusWriter remembers the status of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// refuse answers a request the token check turned down: in its RPC
// protocol's form for Connect, gRPC and gRPC-Web requests, and as text
// with 401 or 403 otherwise.
func (a *authorizer) refuse(w http.ResponseWriter, r *http.Request, code connect.Code, msg string) {
	if a.errors.IsSupported(r) {
		a.errors.Write(w, r, connect.NewError(code, errors.New(msg)))
		return
	}
	status := http.StatusUnauthorized
	if code == connect.CodePermissionDenied {
		status = http.StatusForbidden
	}
	http.Error(w, msg, status)
}

// bearer returns the token of a request: that of an "Authorization:
// Bearer" header, or the access key id of an AWS Signature Version 4
// header, which the aws CLI and boto3 send to the SNS API ("Authorization:
// AWS4-HMAC-SHA256 Credential=<access key id>/<date>/..."): there, the
// token is the access key id. herald keeps only hashes of tokens, so it
// cannot verify the signature itself; the token, like a bearer token, is
// what proves the caller, which is why it must travel over TLS.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, rest, ok := strings.Cut(h, " ")
	switch {
	case !ok:
		return ""
	case strings.EqualFold(scheme, "Bearer"):
		return strings.TrimSpace(rest)
	case scheme == "AWS4-HMAC-SHA256":
		for part := range strings.SplitSeq(rest, ",") {
			if cred, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
				key, _, _ := strings.Cut(cred, "/")
				return key
			}
		}
	}
	return ""
}

func scopeWords(s auth.Scope) string {
	if s == anyScope {
		return "scope admin, publish or consume"
	}
	return string(s) + " scope"
}

func scopeList(scopes []auth.Scope) string {
	var names []string
	for _, s := range scopes {
		names = append(names, string(s))
	}
	return "scope " + strings.Join(names, ", ")
}
