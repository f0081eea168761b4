package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/pipelines/serving/query"
)

// apiError is every refusal the API answers: its status, a kind that names the failure the same
// way on every route (error_type in the native shape, code in OpenAI's), the message for the
// client, and the request field it is about (OpenAI's param), if one.
type apiError struct {
	status int
	kind   string
	msg    string
	param  string
}

func (e *apiError) Error() string { return e.msg }

// The kinds. OpenAI's own codes where it has one (invalid_api_key, model_not_found).
const (
	kindInvalid     = "invalid_request"
	kindAuth        = "invalid_api_key"
	kindNotFound    = "not_found"
	kindModel       = "model_not_found"
	kindMethod      = "method_not_allowed"
	kindSlowBody    = "request_timeout"
	kindTooLarge    = "payload_too_large"
	kindMediaType   = "unsupported_media_type"
	kindOverloaded  = "overloaded"
	kindTimeout     = "timeout"
	kindUnavailable = "shutting_down"
	kindServer      = "server_error"
)

func bad(format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, kind: kindInvalid, msg: fmt.Sprintf(format, args...)}
}

func badParam(param, format string, args ...any) error {
	return &apiError{status: http.StatusBadRequest, kind: kindInvalid, msg: fmt.Sprintf(format, args...), param: param}
}

// shape writes an error body in a route's error shape.
type shape func(w http.ResponseWriter, e *apiError, requestID string)

// nativeError is the shape of reignpipe's own routes: TEI's {"error", "error_type"}, with the
// request id to quote when asking what went wrong.
func nativeError(w http.ResponseWriter, e *apiError, requestID string) {
	writeJSON(w, e.status, map[string]string{"error": e.msg, "error_type": e.kind, "request_id": requestID})
}

// openAIError is the shape OpenAI's clients parse: {"error": {message, type, param, code}}.
func openAIError(w http.ResponseWriter, e *apiError, requestID string) {
	typ := "invalid_request_error"
	switch {
	case e.status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case e.status >= 500:
		typ = "server_error"
	}
	var param *string
	if e.param != "" {
		param = &e.param
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{
		"message": e.msg + " (request " + requestID + ")", "type": typ, "param": param, "code": e.kind,
	}})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// classify turns a handler's error into what the client is told. What is not the client's
// fault is logged whole by the caller and answered with a generic message: a server error's
// text may name files, tables or addresses of the server.
func (a *API) classify(ctx context.Context, err error) *apiError {
	var ae *apiError
	var over *query.OverBudgetError
	var nf *connectors.NotFoundError
	var empty *query.NoTokensError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &empty):
		return &apiError{status: http.StatusBadRequest, kind: kindInvalid, param: "input",
			msg: "the text has no tokens once the GN's tokenizer is done with it (blank, or only characters its vocabulary drops): nothing to embed"}
	case errors.As(err, &over):
		return &apiError{status: http.StatusRequestEntityTooLarge, kind: kindTooLarge, param: "input",
			msg: fmt.Sprintf("the request's text is over %d tokens, the bound on one request (serve --max-tokens)", over.Max)}
	case errors.As(err, &nf):
		// Not nf.Error(): it names where the store looked (a folder, a table).
		msg := fmt.Sprintf("no document %q among the pipeline's vectors", nf.ID)
		if len(nf.Near) > 0 {
			msg += "; ids are prefixed with their source: did you mean " + strings.Join(nf.Near, " or ") + "?"
		}
		return &apiError{status: http.StatusNotFound, kind: kindNotFound, msg: msg, param: "stored_id"}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		a.m.timeouts.Add(1)
		return &apiError{status: http.StatusGatewayTimeout, kind: kindTimeout,
			msg: fmt.Sprintf("the request took longer than %s (serve --timeout); its work was stopped", a.o.Timeout)}
	case a.stopping.Err() != nil && errors.Is(err, context.Canceled):
		return &apiError{status: http.StatusServiceUnavailable, kind: kindUnavailable,
			msg: "the server is shutting down and stopped this request at the end of its grace period; retry on another replica"}
	}
	return &apiError{status: http.StatusInternalServerError, kind: kindServer,
		msg: "internal error; the server's log has the details under this request's id"}
}
