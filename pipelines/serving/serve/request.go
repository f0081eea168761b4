package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/schemas"
)

// mediaType checks a request's Content-Type against the types a route takes: a well-formed
// media type, with no parameter but charset=utf-8 (JSON is UTF-8, and the text policy reads
// text as UTF-8: another charset would be read wrongly, not refused). Nothing is guessed: no
// Content-Type, or ";;;", is a 415.
func mediaType(r *http.Request, accept ...string) (string, error) {
	refuse := func(why string) error {
		return &apiError{status: http.StatusUnsupportedMediaType, kind: kindMediaType,
			msg: fmt.Sprintf("%s: send Content-Type %s", why, strings.Join(accept, ", "))}
	}
	h := r.Header.Get("Content-Type")
	if h == "" {
		return "", refuse("no Content-Type")
	}
	ct, params, err := mime.ParseMediaType(h)
	if err != nil {
		return "", refuse(fmt.Sprintf("Content-Type %q is not a media type", h))
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return "", refuse(fmt.Sprintf("Content-Type %q: the only parameter taken is charset=utf-8", h))
		}
	}
	for _, a := range accept {
		if ct == a {
			return ct, nil
		}
	}
	return "", refuse(fmt.Sprintf("Content-Type %q", ct))
}

// readBody reads the whole body, at most max bytes, under its own deadline: a client that
// sends slowly holds a connection, never a concurrency slot, and is answered 408 when the
// deadline passes. The deadline is lifted again once the body is in.
func readBody(w http.ResponseWriter, r *http.Request, max int64, timeout time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, err
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, &apiError{status: http.StatusRequestEntityTooLarge, kind: kindTooLarge,
			msg: fmt.Sprintf("the request body is over %d bytes (serve --max-body)", tooBig.Limit)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &apiError{status: http.StatusRequestTimeout, kind: kindSlowBody,
			msg: fmt.Sprintf("the request body did not arrive within %s (serve --body-timeout)", timeout)}
	case err != nil:
		return nil, bad("the request body could not be read: %v", err)
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// decodeJSON decodes exactly one JSON object into v: unknown fields and anything after the
// object are refused, so a client's typo or a second request glued to the first is an error,
// not silently ignored. fields lists the known fields for the message.
func decodeJSON(body []byte, v any, fields string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bad("the body is not a JSON request (%s): %v", fields, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("the body holds more after its JSON object; send one object per request")
	}
	return nil
}

// request is the JSON body of the native endpoints. A search names either a document (text,
// with optional id and title) or a stored document by stored_id.
type request struct {
	ID       string `json:"id"`
	Title    string `json:"title"`
	Text     string `json:"text"`
	StoredID string `json:"stored_id"`
	K        *int   `json:"k"`
	Exact    bool   `json:"exact"`
	GN       bool   `json:"gn"`
}

const requestFields = "id, title, text, stored_id, k, exact, gn"

// queryID names a request's document when the client gives no id.
const queryID = "query:request"

// readRequest reads a native request in whichever of the three forms it comes; for text and
// XML bodies k, exact and gn come from the query string. Ids are checked as the sources check
// theirs.
func (a *API) readRequest(r *http.Request, ct string, body []byte) (request, *schemas.Document, error) {
	var q request
	switch ct {
	case "application/json":
		if err := decodeJSON(body, &q, requestFields); err != nil {
			return q, nil, err
		}
		if len(r.URL.Query()) > 0 {
			if q.K != nil || q.Exact || q.GN {
				return q, nil, bad("give k, exact and gn in the JSON body or in the query string, not both")
			}
			if err := fromQuery(r, &q); err != nil {
				return q, nil, err
			}
		}
		if q.StoredID != "" {
			if q.Text != "" || q.ID != "" || q.Title != "" {
				return q, nil, bad("give a document (text, id, title) or stored_id, not both")
			}
			if err := schemas.CheckID(q.StoredID); err != nil {
				return q, nil, badParam("stored_id", "stored_id: %v", err)
			}
			return q, nil, nil
		}
		id := q.ID
		if id == "" {
			id = queryID
		} else if err := schemas.CheckID(id); err != nil {
			return q, nil, badParam("id", "id: %v", err)
		}
		d, err := search.TextDocument(strings.NewReader(q.Text), id, q.Title, a.o.MaxDocBytes)
		if err != nil {
			return q, nil, bad("%v", err)
		}
		return q, &d, nil
	case "text/plain":
		d, err := search.TextDocument(bytes.NewReader(body), queryID, "", a.o.MaxDocBytes)
		if err != nil {
			return q, nil, bad("%v", err)
		}
		err = fromQuery(r, &q)
		return q, &d, err
	case "application/xml", "text/xml":
		d, err := a.patent(body)
		if err != nil {
			return q, nil, err
		}
		err = fromQuery(r, &q)
		return q, d, err
	}
	return q, nil, fmt.Errorf("serve: media type %q passed the check but has no reader", ct)
}

// fromQuery reads k, exact and gn from the query string, refusing what is not a number or a
// boolean, and any other key.
func fromQuery(r *http.Request, q *request) error {
	for key, vals := range r.URL.Query() {
		if len(vals) != 1 {
			return badParam(key, "?%s is given %d times", key, len(vals))
		}
		v := vals[0]
		switch key {
		case "k":
			n, err := strconv.Atoi(v)
			if err != nil {
				return badParam("k", "?k=%q is not a whole number", v)
			}
			q.K = &n
		case "exact", "gn":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return badParam(key, "?%s=%q is not true or false", key, v)
			}
			if key == "exact" {
				q.Exact = b
			} else {
				q.GN = b
			}
		default:
			return badParam(key, "unknown query parameter %q: k, exact and gn exist", key)
		}
	}
	return nil
}

// patent reads one USPTO XML document through the source's own reader, which reads files.
// Whatever the reader says about the file is told as "the request body": the temporary file's
// path is the server's business.
func (a *API) patent(body []byte) (*schemas.Document, error) {
	f, err := os.CreateTemp("", "reignpipe-query-*.xml")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	d, err := search.ReadDocument(f.Name(), search.DocOptions{Format: "uspto", Sections: a.o.Sections, MaxBytes: a.o.MaxDocBytes})
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), f.Name(), "the request body")
		return nil, bad("%s", strings.ReplaceAll(msg, filepath.Base(f.Name()), "the request body"))
	}
	return &d, nil
}
