package sns

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"

	"herald/internal/node"
)

// DefaultZonegroup is the zonegroup of topic ARNs unless configured: the
// name of Ceph's default zonegroup.
const DefaultZonegroup = "default"

// MaxRequestBytes bounds a request body. A Publish's Message is
// URL-encoded, up to three bytes per byte of payload; the node's payload
// limit (1 MiB by default) then applies to the decoded message.
const MaxRequestBytes = 16 << 20

// Config configures a Handler.
type Config struct {
	// Zonegroup is the zonegroup in topic ARNs; empty means
	// DefaultZonegroup. ARNs naming another zonegroup are refused.
	Zonegroup string
	// AllowRemote lets requests from addresses other than loopback in.
	// Set it only when a token check in front of the handler
	// authenticates callers: the handler verifies no signature.
	AllowRemote bool
}

// Handler serves the SNS-compatible API. Mount it for POST requests to
// "/", where the aws CLI and boto3 send them.
type Handler struct {
	node    *node.Node
	arns    arnFormat
	remote  bool
	actions map[string]func(context.Context, *request) (any, error)
}

// New returns a Handler serving n's topics.
func New(n *node.Node, cfg Config) *Handler {
	if cfg.Zonegroup == "" {
		cfg.Zonegroup = DefaultZonegroup
	}
	h := &Handler{node: n, arns: arnFormat{zonegroup: cfg.Zonegroup}, remote: cfg.AllowRemote}
	h.actions = map[string]func(context.Context, *request) (any, error){
		"CreateTopic":        h.createTopic,
		"GetTopicAttributes": h.getTopicAttributes,
		"SetTopicAttributes": h.setTopicAttributes,
		"ListTopics":         h.listTopics,
		"DeleteTopic":        h.deleteTopic,
		"GetTopic":           h.getTopic,
		"Publish":            h.publish,
		"PublishBatch":       h.publishBatch,

		"Subscribe":                 h.subscribe,
		actionConfirm:               h.confirmSubscription,
		"Unsubscribe":               h.unsubscribe,
		"ListSubscriptions":         h.listSubscriptions,
		"ListSubscriptionsByTopic":  h.listSubscriptionsByTopic,
		"GetSubscriptionAttributes": h.getSubscriptionAttributes,
		"SetSubscriptionAttributes": h.setSubscriptionAttributes,
	}
	return h
}

// A request is the form of one call, with its request id and Action, and
// the URL the caller reached the handler at.
type request struct {
	form   map[string][]string
	id     string
	action string
	base   string
}

func (r *request) get(name string) string {
	if v := r.form[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// require returns a parameter that must be given.
func (r *request) require(name string) (string, error) {
	v := r.get(name)
	if v == "" {
		return "", &apiError{code: codeInvalidParameter, msg: fmt.Sprintf("missing required parameter %s", name)}
	}
	return v, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := &request{id: newRequestID(), base: baseURL(r)}
	if IsConfirmation(r) {
		// The receiver of a SubscriptionConfirmation visits its
		// SubscribeURL from wherever it runs: the token is its credential.
		req.form, req.action = r.URL.Query(), actionConfirm
		h.serve(r.Context(), w, req)
		return
	}
	if r.Method != http.MethodPost {
		writeError(w, req.id, &apiError{code: codeInvalidAction, status: http.StatusMethodNotAllowed,
			msg: "the SNS API takes form-encoded POST requests"})
		return
	}
	trusted := h.remote || isLoopback(r.RemoteAddr)
	limit := int64(MaxRequestBytes)
	if !trusted {
		limit = maxConfirmBytes // all it may send is a ConfirmSubscription
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	err := r.ParseForm()
	req.form = r.PostForm
	req.action = req.get("Action")
	switch {
	case !trusted && (err != nil || req.action != actionConfirm):
		writeError(w, req.id, &apiError{code: codeAuthorization, status: http.StatusForbidden,
			msg: "herald verifies no SNS signatures without tokens, so it accepts SNS requests only from loopback addresses (but ConfirmSubscription, whose token is its credential); configure tokens and sign with one as the access key"})
	case err != nil:
		writeError(w, req.id, &apiError{code: codeInvalidParameter, msg: fmt.Sprintf("cannot read the form-encoded request: %v", err)})
	default:
		h.serve(r.Context(), w, req)
	}
}

// maxConfirmBytes bounds the request of a caller that may only confirm a
// subscription.
const maxConfirmBytes = 16 << 10

// serve answers a request whose form has been read.
func (h *Handler) serve(ctx context.Context, w http.ResponseWriter, req *request) {
	do, ok := h.actions[req.action]
	if !ok {
		writeError(w, req.id, &apiError{code: codeInvalidAction,
			msg: fmt.Sprintf("unknown Action %q; herald serves %s", req.action, strings.Join(slices.Sorted(maps.Keys(h.actions)), ", "))})
		return
	}
	result, err := do(ctx, req)
	if err != nil {
		writeError(w, req.id, err)
		return
	}
	writeResult(w, req.action, result, req.id)
}

// IsConfirmation reports whether r visits the SubscribeURL of a
// SubscriptionConfirmation: a GET of / with Action=ConfirmSubscription,
// which the Handler serves besides POSTs, with no credential but the
// token in the URL.
func IsConfirmation(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("Action") == actionConfirm
}

// baseURL is the URL callers reach the handler at, as the request names
// it: where a SubscribeURL points.
func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + "/"
}

// isLoopback reports whether a request's remote address is on loopback.
func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// topicName returns the topic of the request's TopicArn (or, for
// Publish, TargetArn).
func (h *Handler) topicName(r *request, params ...string) (string, error) {
	var arn string
	for _, p := range params {
		if arn = r.get(p); arn != "" {
			break
		}
	}
	if arn == "" {
		return "", &apiError{code: codeInvalidParameter, msg: fmt.Sprintf("missing required parameter %s", params[0])}
	}
	return h.arns.parse(arn)
}

// nodeError turns a node error into an SNS error.
func nodeError(err error) error {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return err
	case errors.Is(err, node.ErrNotFound):
		return &apiError{code: codeNotFound, msg: err.Error()}
	case errors.Is(err, node.ErrInvalid), errors.Is(err, node.ErrFailedPrecondition), errors.Is(err, node.ErrExists):
		return &apiError{code: codeInvalidParameter, msg: err.Error()}
	case errors.Is(err, node.ErrOverloaded), errors.Is(err, node.ErrUnavailable):
		return &apiError{code: codeServiceUnavailable, msg: err.Error(), retryAfter: true}
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return &apiError{code: codeServiceUnavailable, msg: err.Error()}
	}
	return &apiError{code: codeInternal, msg: err.Error()}
}
