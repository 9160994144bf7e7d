package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	heraldv1 "herald/proto/herald/v1"
	"herald/proto/herald/v1/heraldv1connect"
)

// The API's failures that happen before a call reaches connect's codecs
// — no such method (404), not a POST (405), no or an unknown Content-Type
// (415) — connect answers with an empty body, and the mux answers other
// paths with "404 page not found". Here they get the body of any other
// error, Connect's {"code": ..., "message": ...}, and a message that says
// what to do.

// apiHelp is where every message below sends the caller.
const apiHelp = "POST the request as JSON with Content-Type: application/json to /" + heraldv1connect.HeraldServiceName + "/<Method>; see docs/api.md"

// limitRequest limits the body of every request to MaxRequestBytes.
func limitRequest(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limitBody(r)
		h.ServeHTTP(w, r)
	})
}

// jsonErrors gives the empty 404, 405 and 415 answers of h a Connect
// error body.
func jsonErrors(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&errorBodies{ResponseWriter: w, r: r}, r)
	})
}

// errorBodies replaces the body of a 404, 405 or 415 answer.
type errorBodies struct {
	http.ResponseWriter
	r        *http.Request
	replaced bool
}

func (e *errorBodies) WriteHeader(status int) {
	code, msg, ok := failure(e.r, status)
	// A body of a type other than http.NotFound's is connect's, for an
	// error of a method (not_found is 404 too): left as it is.
	if ct := e.Header().Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "text/plain") {
		ok = false
	}
	if !ok {
		e.ResponseWriter.WriteHeader(status)
		return
	}
	e.replaced = true
	writeError(e.ResponseWriter, status, code, msg)
}

// Write drops what h writes after a replaced header: http.NotFound's text.
func (e *errorBodies) Write(p []byte) (int, error) {
	if e.replaced {
		return len(p), nil
	}
	return e.ResponseWriter.Write(p)
}

func (e *errorBodies) Flush() {
	if f, ok := e.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (e *errorBodies) Unwrap() http.ResponseWriter { return e.ResponseWriter }

// failure is the code and message of an API call that failed with HTTP
// status before reaching the method, if it is one of those.
func failure(r *http.Request, status int) (connect.Code, string, bool) {
	switch status {
	case http.StatusUnsupportedMediaType:
		ct := r.Header.Get("Content-Type")
		what := fmt.Sprintf("Content-Type %q is not one the API takes", ct)
		if ct == "" {
			what = "the request has no Content-Type"
		}
		return connect.CodeInvalidArgument, what + ": " + apiHelp + " (protobuf with application/proto, or a Connect or gRPC client, also work)", true
	case http.StatusMethodNotAllowed:
		return connect.CodeInvalidArgument, fmt.Sprintf("%s %s: the API takes POST only: %s", r.Method, r.URL.Path, apiHelp), true
	case http.StatusNotFound:
		return connect.CodeUnimplemented, fmt.Sprintf("%s has no method %q: the methods are %s; %s",
			heraldv1connect.HeraldServiceName, strings.TrimPrefix(r.URL.Path, "/"+heraldv1connect.HeraldServiceName+"/"), methodNames(), apiHelp), true
	}
	return 0, "", false
}

// methodNames lists the HeraldService's methods.
func methodNames() string {
	methods := heraldv1.File_herald_v1_herald_proto.Services().ByName("HeraldService").Methods()
	names := make([]string, methods.Len())
	for i := range methods.Len() {
		names[i] = string(methods.Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// writeError writes a Connect error body.
func writeError(w http.ResponseWriter, status int, code connect.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("X-Content-Type-Options")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // "<Method>", not "\u003cMethod\u003e"
	enc.Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code.String(), msg})
}

// root answers GET /: a browser is sent to the dashboard, if the node
// serves it.
func root(dashboard bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if dashboard {
			http.Redirect(w, r, dashboardPath, http.StatusFound)
			return
		}
		notFound(w, r)
	})
}

// notFound answers a path the node does not serve with what it does serve.
func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, connect.CodeNotFound, fmt.Sprintf(
		"herald serves nothing at %s %s: its API takes POSTs to /%s/<Method> (JSON with Content-Type: application/json; see docs/api.md), "+
			"S3 event notifications POSTs to %s<topic>, the SNS-style API form POSTs to /; the dashboard (if enabled) is at %s, "+
			"and there are /metrics, /healthz and /readyz",
		r.Method, r.URL.Path, heraldv1connect.HeraldServiceName, s3IngestPath, dashboardPath))
}

// s3Misrouted answers requests under /s3/ other than POST /s3/<topic>.
func s3Misrouted(w http.ResponseWriter, r *http.Request) {
	topicName := strings.TrimPrefix(r.URL.Path, s3IngestPath)
	if topicName == "" || strings.Contains(topicName, "/") {
		writeError(w, http.StatusNotFound, connect.CodeNotFound, fmt.Sprintf(
			"%s %s: POST an S3 event notification to %s<topic>, naming one topic; see docs/integrations.md, S3 event notifications", r.Method, r.URL.Path, s3IngestPath))
		return
	}
	w.Header().Set("Allow", http.MethodPost)
	writeError(w, http.StatusMethodNotAllowed, connect.CodeInvalidArgument, fmt.Sprintf(
		`%s %s: POST the S3 event notification ({"Records": [...]}) to %s%s; see docs/integrations.md, S3 event notifications`, r.Method, r.URL.Path, s3IngestPath, topicName))
}
