package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines/serving/search"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
	"github.com/reignpipe/reignpipe/schemas"
)

// start serves the shared corpus (probes_test.go) on a loopback port and returns its base URL
// and the corpus's vectors folder.
func start(t *testing.T, o Options) (*API, *Server, string, string) {
	t.Helper()
	a, srv := serveShared(t, o, Listening{})
	_, vectors := shared(t)
	return a, srv, "http://" + srv.Addr, vectors
}

func post(t *testing.T, url, ctype, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, ctype, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func jsonBody(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestServeAnswers: embed gives the vector the run published for the same text, search gives
// the same answer as the search package, over a real HTTP connection.
func TestServeAnswers(t *testing.T) {
	_, _, base, vectors := start(t, Options{})
	latest, err := vectorfile.Latest(vectors)
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, base+"/v1/embed", "application/json", jsonBody(map[string]string{"id": "q1", "text": searchtest.Texts()["violin"]}))
	if code != 200 {
		t.Fatalf("embed: %d %s", code, body)
	}
	var emb embedOut
	if err := json.Unmarshal(body, &emb); err != nil {
		t.Fatal(err)
	}
	want := latest["t:violin"]
	if len(emb.Vectors) != 1 || emb.Vectors[0].Space != want.Space || emb.Vectors[0].Kind != "aggregate" ||
		!slices.Equal(emb.Vectors[0].Vector, want.Vector) || emb.GNWindows != 0 || emb.ContentHash != fmt.Sprintf("%016x", want.ContentHash) {
		t.Fatalf("embed answer differs from the published vector: space %q kind %q gn %d", emb.Vectors[0].Space, emb.Vectors[0].Kind, emb.GNWindows)
	}

	var res search.Result
	code, body = post(t, base+"/v1/search?k=2", "text/plain", searchtest.Texts()["bread"])
	if code != 200 {
		t.Fatalf("search: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 2 || res.Hits[0].DocID != "t:long" || res.K != 2 {
		t.Fatalf("search answer %s", body)
	}
	for _, h := range res.Hits {
		if h.DocID == "t:bread" || h.DocID == "t:twin" {
			t.Fatalf("the query's own text came back: %s", body)
		}
	}
	code, body = post(t, base+"/v1/search", "application/json", jsonBody(map[string]any{"stored_id": "t:cells", "k": 3, "exact": true}))
	if code != 200 || !strings.Contains(string(body), `"stored": true`) {
		t.Fatalf("search by stored id: %d %s", code, body)
	}
	code, body = post(t, base+"/v1/search", "application/xml", strings.ReplaceAll(testPatent, "BODY", "An oven bakes bread from dough of flour and yeast."))
	if code != 200 || !strings.Contains(string(body), `"doc_id": "uspto:US07000001B2"`) {
		t.Fatalf("search by patent XML: %d %s", code, body)
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(m), `reignpipe_serve_search_requests_total{pipeline="searchtest",stage="serve"} 3`) ||
		!strings.Contains(string(m), `reignpipe_serve_embed_requests_total{pipeline="searchtest",stage="serve"} 1`) {
		t.Fatalf("metrics:\n%s", m)
	}
}

// TestServeRefusesBadInput: every bad request gets the 4xx it deserves with a JSON error that
// says what was wrong, and the server keeps serving.
func TestServeRefusesBadInput(t *testing.T) {
	a, _, base, _ := start(t, Options{MaxBodyBytes: 4096, MaxK: 50})
	tests := []struct {
		name, method, path, ctype, body string
		code                            int
		msg                             string
	}{
		{"not json", "POST", "/v1/search", "application/json", "{text:", 400, "not a JSON request"},
		{"unknown field", "POST", "/v1/search", "application/json", `{"txt":"a"}`, 400, `unknown field "txt"`},
		{"trailing data", "POST", "/v1/search", "application/json", `{"text":"bread"} {"text":"oven"}`, 400, "more after its JSON object"},
		{"trailing garbage", "POST", "/v1/embed", "application/json", `{"text":"bread"}x`, 400, "more after its JSON object"},
		{"blank text", "POST", "/v1/embed", "application/json", `{"text":"  "}`, 400, "no text"},
		// Lone combining accents: not blank, but the tokenizer strips every one of them.
		{"no tokens", "POST", "/v1/search", "application/json", `{"text":"\u0301 \u0308"}`, 400, "no tokens"},
		{"k too large", "POST", "/v1/search", "application/json", `{"text":"bread","k":51}`, 400, "k=51: must be in [1, 50]"},
		{"k zero", "POST", "/v1/search", "application/json", `{"text":"bread","k":0}`, 400, "k=0: must be in [1, 50]"},
		{"k zero in the query", "POST", "/v1/search?k=0", "text/plain", "bread", 400, "k=0: must be in [1, 50]"},
		{"k not a number", "POST", "/v1/search?k=abc", "text/plain", "bread", 400, `?k="abc" is not a whole number`},
		{"k twice", "POST", "/v1/search?k=2&k=3", "text/plain", "bread", 400, "given 2 times"},
		{"unknown query key", "POST", "/v1/search?kk=2", "text/plain", "bread", 400, `unknown query parameter "kk"`},
		{"k in body and query", "POST", "/v1/search?k=2", "application/json", `{"text":"bread","k":3}`, 400, "not both"},
		{"exact not a bool", "POST", "/v1/search?exact=maybe", "text/plain", "bread", 400, "not true or false"},
		{"text and stored id", "POST", "/v1/search", "application/json", `{"text":"a","stored_id":"t:a"}`, 400, "not both"},
		{"embed by id", "POST", "/v1/embed", "application/json", `{"stored_id":"t:bread"}`, 400, "not stored_id"},
		{"embed with k", "POST", "/v1/embed?k=3", "text/plain", "bread", 400, "document only"},
		{"id with NUL", "POST", "/v1/embed", "application/json", `{"id":"a\u0000b","text":"bread"}`, 400, "control characters"},
		{"id with newline", "POST", "/v1/search", "application/json", `{"id":"a\nb","text":"bread"}`, 400, "control characters"},
		{"stored id with newline", "POST", "/v1/search", "application/json", `{"stored_id":"t:a\nb"}`, 400, "control characters"},
		{"unknown id", "POST", "/v1/search", "application/json", `{"stored_id":"nope"}`, 404, `no document "nope" among the pipeline's vectors`},
		{"too big", "POST", "/v1/embed", "text/plain", strings.Repeat("word ", 1000), 413, "over 4096 bytes"},
		{"media type", "POST", "/v1/embed", "image/png", "x", 415, "application/json, text/plain"},
		{"media type ;;;", "POST", "/v1/embed", ";;;", `{"text":"bread"}`, 415, "is not a media type"},
		{"no media type", "POST", "/v1/search", "", `{"text":"bread"}`, 415, "no Content-Type"},
		{"charset other than utf-8", "POST", "/v1/search", "text/plain; charset=latin1", "bread", 415, "charset=utf-8"},
		{"bad patent", "POST", "/v1/search", "application/xml", "<nonsense/>", 400, "no document"},
		{"wrong method", "GET", "/v1/search", "", "", 405, "takes POST"},
		{"unknown path", "GET", "/v2/search", "", "", 404, "no such endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e struct{ Error, ErrorType, RequestID string }
			b, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%d: body is not a JSON error: %v", resp.StatusCode, err)
			}
			if resp.StatusCode != tc.code || !strings.Contains(e.Error, tc.msg) {
				t.Fatalf("%d %q, want %d with %q", resp.StatusCode, e.Error, tc.code, tc.msg)
			}
			var typed map[string]string
			_ = json.Unmarshal(b, &typed)
			if typed["error_type"] == "" || typed["request_id"] == "" || typed["request_id"] != resp.Header.Get("X-Request-Id") {
				t.Fatalf("error %s: want error_type and the request id of the X-Request-Id header %q", b, resp.Header.Get("X-Request-Id"))
			}
			if strings.Contains(string(b), os.TempDir()) || strings.Contains(string(b), "/vectors") {
				t.Fatalf("a server path in the answer: %s", b)
			}
		})
	}
	// A full server refuses at once: every slot held as if by running requests.
	for range cap(a.slot) {
		a.slot <- struct{}{}
	}
	code, body := post(t, base+"/v1/search", "text/plain", "bread")
	for range cap(a.slot) {
		<-a.slot
	}
	if code != 429 || !strings.Contains(string(body), "already running") {
		t.Fatalf("full server: %d %s", code, body)
	}
	if code, body := post(t, base+"/v1/search", "text/plain", "bread"); code != 200 {
		t.Fatalf("after the refusals: %d %s", code, body)
	}
}

// TestServeTimeoutAndDrain: a request past the timeout is a 504; on shutdown a running request
// finishes and gets its answer before the server stops.
func TestServeTimeoutAndDrain(t *testing.T) {
	a, srv, base, _ := start(t, Options{})
	// A second server over the same parts whose requests may take no time at all.
	hasty, err := Listen(Listening{Addr: "127.0.0.1:0"}, New(a.s, Options{Timeout: time.Nanosecond}))
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, "http://"+hasty.Addr+"/v1/embed", "text/plain", "A text no run has seen, so the GN must embed it.")
	if err := hasty.Shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if code != 504 || !strings.Contains(string(body), "longer than") {
		t.Fatalf("timeout: %d %s", code, body)
	}

	// A document of many new windows keeps the GN busy long enough to shut down under it.
	long := strings.Repeat("Tidal turbines convert the kinetic energy of moving sea water into electricity. ", 400)
	var wg sync.WaitGroup
	var gotCode int
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(base+"/v1/embed", "text/plain", bytes.NewReader([]byte(long)))
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		gotCode = resp.StatusCode
	}()
	deadline := time.Now().Add(10 * time.Second)
	for a.m.inflight.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if a.m.inflight.Load() == 0 {
		t.Fatal("the request never started")
	}
	if err := srv.Shutdown(time.Minute); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if gotCode != 200 {
		t.Fatalf("the request running at shutdown got %d", gotCode)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the server still answers after shutdown")
	}
}

const testPatent = `<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE us-patent-grant SYSTEM "us-patent-grant-v42-2006-08-23.dtd" [ ]>
<us-patent-grant lang="EN" dtd-version="v4.2 2006-08-23">
<us-bibliographic-data-grant>
<publication-reference><document-id><country>US</country><doc-number>07000001</doc-number><kind>B2</kind><date>20060101</date></document-id></publication-reference>
<invention-title>Bread oven</invention-title>
</us-bibliographic-data-grant>
<abstract><p>BODY</p></abstract>
<description><p>BODY</p></description>
<claims><claim><claim-text>1. BODY</claim-text></claim></claims>
</us-patent-grant>
`

// FuzzReadRequest: whatever body and media type arrive, the request reader returns a document
// with text, a stored id, or an error that answers 4xx; it never panics.
func FuzzReadRequest(f *testing.F) {
	f.Add(uint8(0), []byte(`{"id":"a","text":"hello"}`))
	f.Add(uint8(0), []byte(`{"stored_id":"t:a","k":3}`))
	f.Add(uint8(1), []byte("plain text"))
	f.Add(uint8(2), []byte(testPatent))
	f.Add(uint8(3), []byte("x"))
	types := []string{"application/json", "text/plain", "application/xml", "image/png"}
	a := &API{}
	a.o.defaults()
	a.o.MaxDocBytes = 1 << 16
	f.Fuzz(func(t *testing.T, ct uint8, body []byte) {
		r, _ := http.NewRequest("POST", "/v1/search?k=2", bytes.NewReader(body))
		r.Header.Set("Content-Type", types[int(ct)%len(types)])
		mt, err := mediaType(r, docTypes...)
		if err == nil {
			var q request
			var doc *schemas.Document
			q, doc, err = a.readRequest(r, mt, body)
			if err == nil {
				if doc == nil && q.StoredID == "" {
					t.Fatal("no document and no stored id, and no error")
				}
				if doc != nil && strings.TrimSpace(doc.Text) == "" {
					t.Fatal("a document without text")
				}
				if doc != nil && schemas.CheckID(doc.ID) != nil {
					t.Fatalf("a document id the sources refuse: %q", doc.ID)
				}
				return
			}
		}
		var ae *apiError
		if !errors.As(err, &ae) || ae.status < 400 || ae.status > 499 || ae.kind == "" {
			t.Fatalf("error %v is not a typed 4xx", err)
		}
		if strings.Contains(ae.msg, os.TempDir()) {
			t.Fatalf("a server path in the message: %s", ae.msg)
		}
	})
}

// FuzzMediaType: any Content-Type header is either one of the types a route takes (with at
// most charset=utf-8) or a typed 415; never a guess.
func FuzzMediaType(f *testing.F) {
	for _, s := range []string{"application/json", "application/json; charset=UTF-8", ";;;", "", "text/plain;charset=latin1", "application/json; a=b", "TEXT/PLAIN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r, _ := http.NewRequest("POST", "/v1/embed", nil)
		r.Header.Set("Content-Type", h)
		ct, err := mediaType(r, docTypes...)
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusUnsupportedMediaType {
				t.Fatalf("%q: %v is not a 415", h, err)
			}
			return
		}
		if !slices.Contains(docTypes, ct) {
			t.Fatalf("%q taken as %q", h, ct)
		}
	})
}

// FuzzEmbeddingsRequest: whatever JSON arrives at /v1/embeddings, the reader gives one string
// per input or a typed 400 naming the param; never a panic, never an input it did not hold.
func FuzzEmbeddingsRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","input":"a"}`, `{"input":["a","b"]}`, `{"input":[1,2]}`, `{"input":[[1]]}`,
		`{"input":[]}`, `{"input":null}`, `{"input":"a"} x`, `{"input":["a",3]}`, `{"input":{"a":1}}`} {
		f.Add([]byte(s))
	}
	a := &API{}
	a.o.defaults()
	f.Fuzz(func(t *testing.T, body []byte) {
		var q embeddingsRequest
		err := decodeJSON(body, &q, embeddingsFields)
		var texts []string
		if err == nil {
			texts, err = a.inputs(q.Input)
		}
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) || ae.status != http.StatusBadRequest {
				t.Fatalf("%v is not a typed 400", err)
			}
			return
		}
		if len(texts) == 0 || len(texts) > a.o.MaxInputs {
			t.Fatalf("%d inputs taken", len(texts))
		}
	})
}
