package serve

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"

	"github.com/reignpipe/reignpipe/pipelines/serving/query"
	"github.com/reignpipe/reignpipe/schemas"
)

// POST /v1/embeddings speaks OpenAI's embeddings API, so that OpenAI's clients and the tools
// built on them (LangChain's and LlamaIndex's OpenAI embedding classes, pgai, Redpanda
// Connect) get reignpipe's vectors by pointing their base URL here. What differs from OpenAI:
//
//   - each input is one whole document, cut into the pipeline's windows, embedded (the chunk
//     cache first) and aggregated exactly as the corpus was: the vector search ranks with,
//     whatever the input's length (no truncation at the GN's 512 tokens);
//   - input must be text: a string or an array of strings. Token arrays are refused (400):
//     OpenAI's token ids are tiktoken's, and the GN reads WordPiece ids of its own vocabulary.
//     LangChain sends token arrays unless check_embedding_ctx_length=False;
//   - model must name one of the pipeline's vector spaces (GET /v1/models, /info): the
//     aggregation's, or, in a REIGN pipeline, the GN mean-pool published beside it. Any other
//     name (text-embedding-3-small, …) is refused with OpenAI's 404 model_not_found: a client
//     that asked for another model's vectors must not be handed these;
//   - dimensions is refused unless it equals the space's dimension: these vectors cannot be
//     shortened (they are not Matryoshka-trained);
//   - usage counts the GN's content tokens (WordPiece, no [CLS]/[SEP]) of every input.
//
// Errors come in OpenAI's shape, {"error": {message, type, param, code}}.

type embeddingsRequest struct {
	Input          json.RawMessage `json:"input"`
	Model          string          `json:"model"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"` // taken and ignored, as a hint for abuse monitoring is
}

const embeddingsFields = "input, model, encoding_format, dimensions, user"

type embeddingOut struct {
	Object    string `json:"object"`
	Index     int    `json:"index"`
	Embedding any    `json:"embedding"` // []float32, or the base64 of their little-endian bytes
}

type embeddingsOut struct {
	Object string         `json:"object"`
	Data   []embeddingOut `json:"data"`
	Model  string         `json:"model"`
	Usage  usage          `json:"usage"`
}

type usage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// inputs reads OpenAI's input: a string or an array of strings.
func (a *API) inputs(raw json.RawMessage) ([]string, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badParam("input", "input is required: a string, or an array of strings (one document each)")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []json.RawMessage
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badParam("input", "input must be a string or an array of strings")
	}
	if len(many) == 0 {
		return nil, badParam("input", "input is an empty array; give at least one string")
	}
	if len(many) > a.o.MaxInputs {
		return nil, badParam("input", "input holds %d strings; at most %d in one request", len(many), a.o.MaxInputs)
	}
	out := make([]string, len(many))
	for i, m := range many {
		if err := json.Unmarshal(m, &out[i]); err != nil {
			if t := strings.TrimSpace(string(m)); t != "" && (t[0] == '[' || t[0] == '-' || t[0] >= '0' && t[0] <= '9') {
				return nil, badParam("input", "input is token ids; send text: reignpipe tokenizes with its GN's own vocabulary, and ids of another tokenizer "+
					"(tiktoken's) would embed other text (LangChain: OpenAIEmbeddings(check_embedding_ctx_length=False))")
			}
			return nil, badParam("input", "input[%d] is not a string", i)
		}
	}
	return out, nil
}

func (a *API) embeddings(ctx context.Context, c *call) (any, error) {
	var q embeddingsRequest
	if err := decodeJSON(c.body, &q, embeddingsFields); err != nil {
		return nil, err
	}
	texts, err := a.inputs(q.Input)
	if err != nil {
		return nil, err
	}
	e := a.s.Embedder
	gn := false
	dim := e.Dim()
	switch q.Model {
	case e.Space():
	case "":
		return nil, badParam("model", "model is required: %s", a.modelNames())
	default:
		if q.Model != e.GNSpace() || e.GNSpace() == "" {
			return nil, &apiError{status: http.StatusNotFound, kind: kindModel, param: "model",
				msg: fmt.Sprintf("the model %q does not exist here: %s", q.Model, a.modelNames())}
		}
		gn, dim = true, e.GNDim()
	}
	switch q.EncodingFormat {
	case "", "float", "base64":
	default:
		return nil, badParam("encoding_format", "encoding_format %q: float or base64", q.EncodingFormat)
	}
	if q.Dimensions != nil && *q.Dimensions != dim {
		return nil, badParam("dimensions", "dimensions=%d: the vectors of %s have %d dimensions and cannot be shortened; leave dimensions out", *q.Dimensions, q.Model, dim)
	}
	docs := make([]schemas.Document, len(texts))
	for i, t := range texts { // every input is checked before any is embedded
		if docs[i], err = a.textDoc(t, i); err != nil {
			return nil, err
		}
	}
	a.m.embeddings.Add(1)
	res, err := a.embedAll(ctx, docs)
	if err != nil {
		return nil, err
	}
	out := embeddingsOut{Object: "list", Model: q.Model, Data: make([]embeddingOut, len(res))}
	for i, r := range res {
		c.cost(r)
		v := r.Vector.Vector
		if gn {
			v = r.Vector.GNVector
		}
		out.Data[i] = embeddingOut{Object: "embedding", Index: i, Embedding: v}
		if q.EncodingFormat == "base64" {
			out.Data[i].Embedding = base64Floats(v)
		}
		out.Usage.PromptTokens += r.Vector.NTokens
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens
	return out, nil
}

// embedParallel is how many of one request's inputs are embedded at once: enough for their
// windows to fill the GN's batches together, few enough that one request's goroutines stay few.
const embedParallel = 8

// embedAll embeds docs, a few at a time; the first failure cancels the rest.
func (a *API) embedAll(ctx context.Context, docs []schemas.Document) ([]*query.Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	res := make([]*query.Result, len(docs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, embedParallel)
	for i := range docs {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := a.s.Embedder.Embed(ctx, docs[i])
			if err != nil {
				cancel(err)
				return
			}
			res[i] = r
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return res, nil
}

// base64Floats is OpenAI's base64 encoding: the vector's float32s, little-endian.
func base64Floats(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}

func (a *API) modelNames() string {
	e := a.s.Embedder
	if gs := e.GNSpace(); gs != "" {
		return fmt.Sprintf("give %q (the pipeline's vectors) or %q (the GN mean-pool beside them)", e.Space(), gs)
	}
	return fmt.Sprintf("give %q (the pipeline's vectors, as GET /v1/models lists)", e.Space())
}

// models is GET /v1/models, in OpenAI's shape.
func (a *API) models(context.Context, *call) (any, error) {
	e := a.s.Embedder
	data := []map[string]any{{"id": e.Space(), "object": "model", "created": 0, "owned_by": "reignpipe"}}
	if gs := e.GNSpace(); gs != "" {
		data = append(data, map[string]any{"id": gs, "object": "model", "created": 0, "owned_by": "reignpipe"})
	}
	return map[string]any{"object": "list", "data": data}, nil
}
