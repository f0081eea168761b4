package serve

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/internal/testenv"
	"github.com/reignpipe/reignpipe/pipelines/serving/search/searchtest"
)

// The OpenAI route gives, for each input, the vector the run published for the same text
// (float and base64 alike), in OpenAI's response shape, with the tokens counted.
func TestEmbeddingsAreTheCorpusVectors(t *testing.T) {
	_, srv := serveShared(t, Options{}, Listening{})
	s, vectors := shared(t)
	latest, err := vectorfile.Latest(vectors)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"violin", "long", "cells"}
	var in []string
	for _, id := range ids {
		in = append(in, searchtest.Texts()[id])
	}
	for _, format := range []string{"float", "base64", ""} {
		code, body := post(t, "http://"+srv.Addr+"/v1/embeddings", "application/json",
			jsonBody(map[string]any{"model": s.Embedder.Space(), "input": in, "encoding_format": format, "dimensions": s.Embedder.Dim()}))
		if code != 200 {
			t.Fatalf("%s: %d %s", format, code, body)
		}
		var out struct {
			Object string
			Model  string
			Data   []struct {
				Object    string
				Index     int
				Embedding json.RawMessage
			}
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				TotalTokens  int `json:"total_tokens"`
			}
		}
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatal(err)
		}
		if out.Object != "list" || out.Model != s.Embedder.Space() || len(out.Data) != len(ids) {
			t.Fatalf("%s: answer %s", format, body[:min(len(body), 300)])
		}
		tokens := 0
		for i, d := range out.Data {
			want := latest["t:"+ids[i]]
			tokens += want.NTokens
			var got []float32
			if format == "base64" {
				var s string
				json.Unmarshal(d.Embedding, &s)
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					t.Fatal(err)
				}
				for j := 0; j+4 <= len(b); j += 4 {
					got = append(got, math.Float32frombits(binary.LittleEndian.Uint32(b[j:])))
				}
			} else if err := json.Unmarshal(d.Embedding, &got); err != nil {
				t.Fatal(err)
			}
			if d.Object != "embedding" || d.Index != i || !slices.Equal(got, want.Vector) {
				t.Fatalf("%s: input %d (%s) is not the published vector", format, i, ids[i])
			}
		}
		if out.Usage.PromptTokens != tokens || out.Usage.TotalTokens != tokens || tokens == 0 {
			t.Fatalf("%s: usage %+v, want %d tokens", format, out.Usage, tokens)
		}
	}
}

// What the route refuses, each in OpenAI's error shape with the param it is about.
func TestEmbeddingsRefusals(t *testing.T) {
	_, srv := serveShared(t, Options{MaxInputs: 3}, Listening{})
	s, _ := shared(t)
	m := s.Embedder.Space()
	tests := []struct {
		name, body   string
		code         int
		param, code2 string
		msg          string
	}{
		{"other model", `{"model":"text-embedding-3-small","input":"a"}`, 404, "model", "model_not_found", "does not exist here"},
		{"no model", `{"input":"a"}`, 400, "model", "invalid_request", "model is required"},
		{"token ids", `{"model":"` + m + `","input":[101,2023]}`, 400, "input", "invalid_request", "token ids"},
		{"token id arrays", `{"model":"` + m + `","input":[[101,2023]]}`, 400, "input", "invalid_request", "check_embedding_ctx_length=False"},
		{"empty array", `{"model":"` + m + `","input":[]}`, 400, "input", "invalid_request", "empty array"},
		{"blank string", `{"model":"` + m + `","input":["ok","  "]}`, 400, "input", "invalid_request", "input[1]"},
		{"no tokens", `{"model":"` + m + `","input":"\u0301"}`, 400, "input", "invalid_request", "no tokens"},
		{"no input", `{"model":"` + m + `"}`, 400, "input", "invalid_request", "input is required"},
		{"too many inputs", `{"model":"` + m + `","input":["a","b","c","d"]}`, 400, "input", "invalid_request", "at most 3"},
		{"other dimensions", `{"model":"` + m + `","input":"a","dimensions":256}`, 400, "dimensions", "invalid_request", "cannot be shortened"},
		{"other format", `{"model":"` + m + `","input":"a","encoding_format":"int8"}`, 400, "encoding_format", "invalid_request", "float or base64"},
		{"unknown field", `{"model":"` + m + `","input":"a","truncate":true}`, 400, "", "invalid_request", `unknown field "truncate"`},
		{"trailing data", `{"model":"` + m + `","input":"a"}{}`, 400, "", "invalid_request", "more after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := post(t, "http://"+srv.Addr+"/v1/embeddings", "application/json", tc.body)
			var e struct {
				Error struct {
					Message, Type string
					Param         *string
					Code          string
				}
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%d: not OpenAI's error shape: %s", code, body)
			}
			param := ""
			if e.Error.Param != nil {
				param = *e.Error.Param
			}
			if code != tc.code || e.Error.Type != "invalid_request_error" || param != tc.param || e.Error.Code != tc.code2 || !strings.Contains(e.Error.Message, tc.msg) {
				t.Fatalf("%d %s; want %d param %q code %q with %q", code, body, tc.code, tc.param, tc.code2, tc.msg)
			}
		})
	}
	code, body := post(t, "http://"+srv.Addr+"/v1/embeddings", "text/plain", "a")
	if code != 415 || !strings.Contains(string(body), `"code":"unsupported_media_type"`) {
		t.Fatalf("text body: %d %s", code, body)
	}
}

// OpenAI's own Python client and LangChain's OpenAIEmbeddings, pointed at the server, get the
// vectors the pipeline wrote (the ones search ranks with).
func TestEmbeddingsPythonClients(t *testing.T) {
	py := testenv.Python(t, "openai", "langchain_openai")
	keys, _ := LoadKeys("", key1)
	_, srv := serveShared(t, Options{Keys: keys}, Listening{})
	s, vectors := shared(t)
	latest, err := vectorfile.Latest(vectors)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"violin", "long"}
	var in []string
	for _, id := range ids {
		in = append(in, searchtest.Texts()[id])
	}
	dir := t.TempDir()
	inFile := filepath.Join(dir, "in.json")
	b, _ := json.Marshal(in)
	os.WriteFile(inFile, b, 0o600)
	script := `
import json, sys
from openai import OpenAI, AuthenticationError, NotFoundError
from langchain_openai import OpenAIEmbeddings
base, key, model, path = sys.argv[1:5]
texts = json.load(open(path))
c = OpenAI(base_url=base, api_key=key, max_retries=0)
r = c.embeddings.create(model=model, input=texts)  # the client asks for base64 and decodes it
fl = c.embeddings.create(model=model, input=texts[0], encoding_format="float")
errs = {}
try:
    OpenAI(base_url=base, api_key="wrong-key-0123456789", max_retries=0).embeddings.create(model=model, input="a")
except AuthenticationError as e:
    errs["auth"] = e.status_code
try:
    c.embeddings.create(model="text-embedding-3-small", input="a")
except NotFoundError as e:
    errs["model"] = e.code
lc = OpenAIEmbeddings(model=model, base_url=base, api_key=key, check_embedding_ctx_length=False, max_retries=0)
print(json.dumps({"openai": [d.embedding for d in r.data], "float": fl.data[0].embedding,
    "usage": r.usage.prompt_tokens, "langchain_docs": lc.embed_documents(texts), "langchain_query": lc.embed_query(texts[0]),
    "errs": errs}))
`
	cmd := exec.Command(py, "-c", script, "http://"+srv.Addr+"/v1", key1, s.Embedder.Space(), inFile)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("python clients: %v\n%s", err, stderr)
	}
	var got struct {
		OpenAI         [][]float64    `json:"openai"`
		LangchainDocs  [][]float64    `json:"langchain_docs"`
		Float          []float64      `json:"float"`
		LangchainQuery []float64      `json:"langchain_query"`
		Usage          int            `json:"usage"`
		Errs           map[string]any `json:"errs"`
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// base64 round-trips float32 exactly; JSON floats are printed to round-trip float32 too.
	same := func(a []float64, b []float32) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if float32(a[i]) != b[i] {
				return false
			}
		}
		return true
	}
	tokens := 0
	for i, id := range ids {
		want := latest["t:"+id]
		tokens += want.NTokens
		if !same(got.OpenAI[i], want.Vector) || !same(got.LangchainDocs[i], want.Vector) {
			t.Fatalf("input %s: the clients' vectors are not the published ones", id)
		}
	}
	if !same(got.Float, latest["t:violin"].Vector) || !same(got.LangchainQuery, latest["t:violin"].Vector) {
		t.Fatal("float / embed_query vectors are not the published ones")
	}
	if got.Usage != tokens {
		t.Fatalf("usage %d, want %d", got.Usage, tokens)
	}
	if got.Errs["auth"] != float64(401) || got.Errs["model"] != "model_not_found" {
		t.Fatalf("the client's errors: %v", got.Errs)
	}
}
