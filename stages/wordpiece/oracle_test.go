package wordpiece

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reignpipe/reignpipe/internal/testenv"
)

// Both GNs that REIGN ships use this tokenizer family; parity is checked on each file.
var gnTokenizers = []string{"bge-small-en-v15", "all-minilm-l6-v2"}

// runOracle feeds texts to ops/oracles/hf_tokenize.py in one subprocess and returns one JSON
// line per text. Input is written from a goroutine so that neither pipe can fill and block.
func runOracle(t testing.TB, tokenizerJSON, mode string, texts []string) []json.RawMessage {
	t.Helper()
	py := testenv.Python(t, "tokenizers")
	script := filepath.Join(testenv.Root(), "ops", "oracles", "hf_tokenize.py")
	cmd := exec.Command(py, script, tokenizerJSON, mode)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	writeErr := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(stdin, 1<<20)
		enc := json.NewEncoder(w)
		for _, s := range texts {
			if err := enc.Encode(map[string]string{"text": s}); err != nil {
				writeErr <- err
				return
			}
		}
		if err := w.Flush(); err != nil {
			writeErr <- err
			return
		}
		writeErr <- stdin.Close()
	}()
	out := make([]json.RawMessage, 0, len(texts))
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	for sc.Scan() {
		out = append(out, append(json.RawMessage(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading oracle output: %v", err)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("writing oracle input: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("oracle %s: %v", script, err)
	}
	if len(out) != len(texts) {
		t.Fatalf("oracle returned %d lines for %d texts", len(out), len(texts))
	}
	return out
}

func oracleIDs(t testing.TB, tokenizerJSON string, texts []string) [][]int32 {
	t.Helper()
	raw := runOracle(t, tokenizerJSON, "ids", texts)
	ids := make([][]int32, len(raw))
	for i, line := range raw {
		var v struct {
			IDs []int32 `json:"ids"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("oracle line %d: %v", i, err)
		}
		ids[i] = v.IDs
	}
	return ids
}

func oracleWords(t testing.TB, tokenizerJSON string, texts []string) [][]string {
	t.Helper()
	raw := runOracle(t, tokenizerJSON, "words", texts)
	words := make([][]string, len(raw))
	for i, line := range raw {
		var v struct {
			Words []string `json:"words"`
		}
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("oracle line %d: %v", i, err)
		}
		words[i] = v.Words
	}
	return words
}

// preTokens runs only the normaliser and pre-tokenizer (text must hold no added token).
func (t *Tokenizer) preTokens(text string) []string {
	words := []string{}
	ws := &workspace{preTokens: &words}
	t.encodeSegment(nil, ws, text)
	return words
}

// pieces maps ids back to vocab strings for readable failure messages.
func (t *Tokenizer) pieces() map[int32]string {
	m := make(map[int32]string, len(t.vocab)+len(t.added))
	for p, id := range t.vocab {
		m[id] = p
	}
	for _, a := range t.added {
		m[a.id] = a.content
	}
	return m
}

// describeMismatch shows where two id sequences first differ, with the text around the
// differing token, so that a parity failure can be debugged from the test log alone.
func describeMismatch(tok *Tokenizer, names map[int32]string, source, text string, got, want []int32) string {
	pos := 0
	for pos < len(got) && pos < len(want) && got[pos] == want[pos] {
		pos++
	}
	window := func(ids []int32) string {
		lo, hi := max(0, pos-5), min(len(ids), pos+6)
		var b strings.Builder
		for i := lo; i < hi; i++ {
			mark := ""
			if i == pos {
				mark = ">>"
			}
			fmt.Fprintf(&b, " %s%d:%q", mark, ids[i], names[ids[i]])
		}
		return b.String()
	}
	// Locate the text near the first difference by encoding growing prefixes: the shortest
	// prefix that already yields pos+1 tokens ends just past the differing token.
	lo, hi := 0, len(text)
	for lo < hi {
		mid := (lo + hi) / 2
		if len(tok.Encode(text[:mid])) > pos {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	ctx := text[max(0, lo-120):min(len(text), lo+80)]
	return fmt.Sprintf("%s: first difference at token %d of %d (go) / %d (hf)\n  text near it: %q\n  go:%s\n  hf:%s",
		source, pos, len(got), len(want), ctx, window(got), window(want))
}
