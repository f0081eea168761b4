// Package wordpiece is a BERT WordPiece tokenizer whose token ids equal those of Hugging Face
// `tokenizers` (BertNormalizer + BertPreTokenizer + WordPiece model, as read from a
// tokenizer.json). Parity is the point of the package: where Hugging Face relies on Unicode
// tables of a particular vintage, this package reproduces that vintage rather than using the
// newest tables (see unicode.go).
package wordpiece

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer is an immutable, loaded tokenizer. All methods are safe for concurrent use.
type Tokenizer struct {
	vocab map[string]int32 // whole-word pieces (no continuing prefix)
	// cont maps a continuation piece without its prefix ("##abc" is stored as "abc") to its id,
	// so that the inner loop never has to build prefix+piece strings.
	cont        map[string]int32
	maxPieceLen int // longest key of vocab or cont, in bytes: longer candidates cannot match
	maxChars    int // max_input_chars_per_word
	unk         int32
	cls, sep    int32
	pad         int32
	vocabSize   int
	fileHash    string

	cleanText, chinese, stripAccents, lowercase bool

	added   []addedToken // sorted longest first, so the first hit at a position is the longest
	addedAt [256]bool    // first bytes of added tokens: positions worth checking

	scratch sync.Pool // *workspace
}

type addedToken struct {
	content string
	id      int32
}

// workspace holds per-call buffers so that steady-state encoding does not allocate.
type workspace struct {
	clean []byte // segment after clean_text and Chinese-character spacing
	nfd   []byte // the same after NFD (only when accents are stripped)
	word  []byte // the current pre-token
	iter  norm.Iter

	preTokens *[]string // tests only: collect pre-tokens instead of encoding them
}

type fileJSON struct {
	AddedTokens []struct {
		ID         *int64 `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
}

type normalizerJSON struct {
	Type               string `json:"type"`
	CleanText          *bool  `json:"clean_text"`
	HandleChineseChars *bool  `json:"handle_chinese_chars"`
	StripAccents       *bool  `json:"strip_accents"`
	Lowercase          *bool  `json:"lowercase"`
}

type modelJSON struct {
	Type                    string           `json:"type"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	MaxInputCharsPerWord    *int64           `json:"max_input_chars_per_word"`
	Vocab                   map[string]int64 `json:"vocab"`
}

type postJSON struct {
	Type          string `json:"type"`
	SpecialTokens map[string]struct {
		IDs []int64 `json:"ids"`
	} `json:"special_tokens"`
}

// Load reads a Hugging Face tokenizer.json.
func Load(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wordpiece: %w", err)
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}

// Parse reads a tokenizer.json from bytes. Only the parts that affect the content ids are
// honoured: truncation, padding, the post-processor's template and the decoder are ignored,
// because Encode returns the content tokens only.
func Parse(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("wordpiece: tokenizer.json: %w", err)
	}
	sum := sha256.Sum256(data)
	t := &Tokenizer{fileHash: hex.EncodeToString(sum[:])}
	if err := t.parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if err := checkPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if err := t.parseModel(f.Model); err != nil {
		return nil, err
	}
	maxID := int64(-1)
	for _, id := range t.vocab {
		maxID = max(maxID, int64(id))
	}
	for _, id := range t.cont {
		maxID = max(maxID, int64(id))
	}
	byName := map[string]int32{}
	for i, a := range f.AddedTokens {
		switch {
		case a.ID == nil || *a.ID < 0 || *a.ID > math.MaxInt32:
			return nil, fmt.Errorf("wordpiece: added_tokens[%d] %q: missing or out-of-range id", i, a.Content)
		case a.Content == "":
			return nil, fmt.Errorf("wordpiece: added_tokens[%d]: empty content", i)
		case a.SingleWord || a.LStrip || a.RStrip || a.Normalized:
			// Hugging Face matches such tokens with extra rules (word boundaries, eating
			// neighbouring spaces, matching after normalisation) that BERT files never use.
			return nil, fmt.Errorf("wordpiece: added token %q uses single_word/lstrip/rstrip/normalized, which is not supported", a.Content)
		}
		id := int32(*a.ID)
		t.added = append(t.added, addedToken{a.Content, id})
		t.addedAt[a.Content[0]] = true
		byName[a.Content] = id
		maxID = max(maxID, int64(id))
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].content) > len(t.added[j].content) })
	t.vocabSize = int(maxID + 1)

	special := func(name string) (int32, bool) {
		if id, ok := byName[name]; ok {
			return id, true
		}
		id, ok := t.vocab[name]
		return id, ok
	}
	var post postJSON
	if len(f.PostProcessor) > 0 && string(f.PostProcessor) != "null" {
		// The post-processor is where a template names its ids; a malformed one is ignored
		// here because Encode never applies it.
		_ = json.Unmarshal(f.PostProcessor, &post)
	}
	fromTemplate := func(name string) (int32, bool) {
		if st, ok := post.SpecialTokens[name]; ok && len(st.IDs) == 1 && st.IDs[0] >= 0 && st.IDs[0] <= math.MaxInt32 {
			return int32(st.IDs[0]), true
		}
		return special(name)
	}
	var ok bool
	if t.cls, ok = fromTemplate("[CLS]"); !ok {
		return nil, errors.New("wordpiece: tokenizer.json has no [CLS] token")
	}
	if t.sep, ok = fromTemplate("[SEP]"); !ok {
		return nil, errors.New("wordpiece: tokenizer.json has no [SEP] token")
	}
	if t.pad, ok = special("[PAD]"); !ok {
		return nil, errors.New("wordpiece: tokenizer.json has no [PAD] token")
	}
	for _, id := range []int32{t.cls, t.sep, t.pad} {
		t.vocabSize = max(t.vocabSize, int(id)+1)
	}
	t.scratch.New = func() any { return new(workspace) }
	return t, nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("wordpiece: normalizer is null; only BertNormalizer is supported")
	}
	var n normalizerJSON
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("wordpiece: normalizer: %w", err)
	}
	if n.Type != "BertNormalizer" {
		return fmt.Errorf("wordpiece: normalizer type %q is not supported (only BertNormalizer)", n.Type)
	}
	// Defaults are those of Hugging Face's BertNormalizer when a field is absent.
	t.cleanText, t.chinese, t.lowercase = true, true, true
	if n.CleanText != nil {
		t.cleanText = *n.CleanText
	}
	if n.HandleChineseChars != nil {
		t.chinese = *n.HandleChineseChars
	}
	if n.Lowercase != nil {
		t.lowercase = *n.Lowercase
	}
	// strip_accents null means "do what lowercase does" (the original BERT uncased recipe).
	t.stripAccents = t.lowercase
	if n.StripAccents != nil {
		t.stripAccents = *n.StripAccents
	}
	return nil
}

func checkPreTokenizer(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("wordpiece: pre_tokenizer is null; only BertPreTokenizer is supported")
	}
	var p struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return fmt.Errorf("wordpiece: pre_tokenizer: %w", err)
	}
	if p.Type != "BertPreTokenizer" {
		return fmt.Errorf("wordpiece: pre_tokenizer type %q is not supported (only BertPreTokenizer)", p.Type)
	}
	return nil
}

func (t *Tokenizer) parseModel(raw json.RawMessage) error {
	if len(raw) == 0 || string(raw) == "null" {
		return errors.New("wordpiece: model is missing")
	}
	var m modelJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("wordpiece: model: %w", err)
	}
	if m.Type != "WordPiece" {
		return fmt.Errorf("wordpiece: model type %q is not supported (only WordPiece)", m.Type)
	}
	unk, prefix := "[UNK]", "##"
	t.maxChars = 100
	if m.UnkToken != nil {
		unk = *m.UnkToken
	}
	if m.ContinuingSubwordPrefix != nil {
		prefix = *m.ContinuingSubwordPrefix
	}
	if m.MaxInputCharsPerWord != nil {
		if *m.MaxInputCharsPerWord < 0 || *m.MaxInputCharsPerWord > math.MaxInt32 {
			return fmt.Errorf("wordpiece: max_input_chars_per_word %d out of range", *m.MaxInputCharsPerWord)
		}
		t.maxChars = int(*m.MaxInputCharsPerWord)
	}
	if len(m.Vocab) == 0 {
		return errors.New("wordpiece: model.vocab is empty")
	}
	t.vocab = make(map[string]int32, len(m.Vocab))
	t.cont = make(map[string]int32, len(m.Vocab)/4)
	for piece, id := range m.Vocab {
		if id < 0 || id > math.MaxInt32 {
			return fmt.Errorf("wordpiece: vocab id %d of %q out of range", id, piece)
		}
		t.vocab[piece] = int32(id)
		t.maxPieceLen = max(t.maxPieceLen, len(piece))
		if rest, ok := strings.CutPrefix(piece, prefix); ok {
			t.cont[rest] = int32(id)
		}
	}
	id, ok := t.vocab[unk]
	if !ok {
		return fmt.Errorf("wordpiece: unk_token %q is not in the vocab", unk)
	}
	t.unk = id
	return nil
}

// CLS is the id of [CLS] (from the post-processor template when it names one).
func (t *Tokenizer) CLS() int32 { return t.cls }

// SEP is the id of [SEP].
func (t *Tokenizer) SEP() int32 { return t.sep }

// PAD is the id of [PAD].
func (t *Tokenizer) PAD() int32 { return t.pad }

// UNK is the id of the model's unk_token.
func (t *Tokenizer) UNK() int32 { return t.unk }

// VocabSize is one more than the largest id the tokenizer can return, so every id Encode
// returns is in [0, VocabSize).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// FileHash is the hex SHA-256 of the tokenizer.json bytes.
func (t *Tokenizer) FileHash() string { return t.fileHash }
