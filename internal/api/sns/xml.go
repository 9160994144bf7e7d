package sns

import (
	"crypto/rand"
	"encoding/xml"
	"fmt"
	"net/http"
	"strings"

	"herald/internal/envelope"
)

// namespace is the XML namespace of SNS responses, as Ceph writes it.
const namespace = "https://sns.amazonaws.com/doc/2010-03-31/"

// SNS error codes herald returns.
const (
	codeInvalidParameter   = "InvalidParameter"
	codeInvalidAction      = "InvalidAction"
	codeNotFound           = "NotFound"
	codeAuthorization      = "AuthorizationError"
	codeServiceUnavailable = "ServiceUnavailable"
	codeInternal           = "InternalError"
	// Subscribe's, for a topic with as many subscriptions as it may have.
	codeSubscriptionLimit = "SubscriptionLimitExceeded"
	// PublishBatch's, for a batch that breaks SNS's limits.
	codeEmptyBatch          = "EmptyBatchRequest"
	codeTooManyEntries      = "TooManyEntriesInBatchRequest"
	codeInvalidBatchEntryID = "InvalidBatchEntryId"
	codeBatchIDsNotDistinct = "BatchEntryIdsNotDistinct"
	codeBatchTooLong        = "BatchRequestTooLong"
)

// codeStatus is the HTTP status of each error code.
var codeStatus = map[string]int{
	codeInvalidParameter:    http.StatusBadRequest,
	codeInvalidAction:       http.StatusBadRequest,
	codeNotFound:            http.StatusNotFound,
	codeAuthorization:       http.StatusForbidden,
	codeServiceUnavailable:  http.StatusServiceUnavailable,
	codeInternal:            http.StatusInternalServerError,
	codeSubscriptionLimit:   http.StatusForbidden,
	codeEmptyBatch:          http.StatusBadRequest,
	codeTooManyEntries:      http.StatusBadRequest,
	codeInvalidBatchEntryID: http.StatusBadRequest,
	codeBatchIDsNotDistinct: http.StatusBadRequest,
	codeBatchTooLong:        http.StatusBadRequest,
}

// An apiError is an SNS error: a code, a message saying what was wrong
// and what to do, and the HTTP status (codeStatus's unless set).
type apiError struct {
	code       string
	msg        string
	status     int
	retryAfter bool // the request may succeed in a second
}

func (e *apiError) Error() string { return e.code + ": " + e.msg }

// httpStatus is the HTTP status of the error.
func (e *apiError) httpStatus() int {
	if e.status != 0 {
		return e.status
	}
	return codeStatus[e.code]
}

type errorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	NS      string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string
		Code    string
		Message string
	}
	RequestID string `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, requestID string, err error) {
	ae, ok := err.(*apiError)
	if !ok {
		ae = &apiError{code: codeInternal, msg: err.Error()}
	}
	status := ae.httpStatus()
	var resp errorResponse
	resp.NS = namespace
	resp.Error.Type = "Sender"
	if status >= 500 {
		resp.Error.Type = "Receiver"
	}
	resp.Error.Code, resp.Error.Message, resp.RequestID = ae.code, ae.msg, requestID
	if ae.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	writeXML(w, status, resp)
}

type responseMetadata struct {
	RequestID string `xml:"RequestId"`
}

// writeResult writes the <ActionResponse> document holding result as
// <ActionResult>.
func writeResult(w http.ResponseWriter, action string, result any, requestID string) {
	resp := struct {
		XMLName  xml.Name
		NS       string `xml:"xmlns,attr"`
		Result   any
		Metadata responseMetadata `xml:"ResponseMetadata"`
	}{
		XMLName:  xml.Name{Local: action + "Response"},
		NS:       namespace,
		Result:   xmlElement{name: action + "Result", value: result},
		Metadata: responseMetadata{RequestID: requestID},
	}
	writeXML(w, http.StatusOK, resp)
}

// xmlElement encodes value under the element name; nil as an empty one.
type xmlElement struct {
	name  string
	value any
}

func (e xmlElement) MarshalXML(enc *xml.Encoder, _ xml.StartElement) error {
	start := xml.StartElement{Name: xml.Name{Local: e.name}}
	if e.value == nil {
		if err := enc.EncodeToken(start); err != nil {
			return err
		}
		return enc.EncodeToken(start.End())
	}
	return enc.EncodeElement(e.value, start)
}

func writeXML(w http.ResponseWriter, status int, v any) {
	body, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, "encode the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	w.Write([]byte(xml.Header))
	w.Write(body)
}

// newRequestID returns a random id in UUID form.
func newRequestID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// arnFormat writes and parses topic ARNs: arn:aws:sns:<zonegroup>::<topic>.
// herald has no tenants, so the account field is empty.
type arnFormat struct {
	zonegroup string
}

func (f arnFormat) of(topicName string) string {
	return envelope.TopicARN(f.zonegroup, topicName)
}

func (f arnFormat) parse(arn string) (string, error) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sns" {
		return "", &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("invalid topic ARN %q; herald's are arn:aws:sns:%s::<topic>", arn, f.zonegroup)}
	}
	zonegroup, tenant, name := parts[3], parts[4], parts[5]
	if zonegroup != f.zonegroup {
		return "", &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("topic ARN %q names zonegroup %q, but this herald serves zonegroup %q; use arn:aws:sns:%s::%s", arn, zonegroup, f.zonegroup, f.zonegroup, name)}
	}
	if tenant != "" {
		return "", &apiError{code: codeInvalidParameter,
			msg: fmt.Sprintf("topic ARN %q names tenant %q, but herald has no tenants; leave that field empty: arn:aws:sns:%s::%s", arn, tenant, f.zonegroup, name)}
	}
	if name == "" {
		return "", &apiError{code: codeInvalidParameter, msg: fmt.Sprintf("topic ARN %q names no topic", arn)}
	}
	return name, nil
}
