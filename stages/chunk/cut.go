package chunk

import "strings"

// Tokenizer is the part of the GN tokenizer that cutting needs: content ids only, since the
// windows add [CLS] and [SEP] themselves.
type Tokenizer interface {
	AppendEncode(dst []int32, text string) []int32
	CLS() int32
	SEP() int32
}

// Cut tokenizes text and cuts it into the pipeline's windows: the reference's fixed windows, or
// paragraph-anchored ones when anchored is set. It returns the windows and the number of content
// tokens. The pipeline run and the query side (search, serve) both cut through here, so a query
// document gets exactly the window keys its corpus copy has and hits the same cached windows.
// p must be valid (Validate); the pipeline checks it when its config loads.
func (p Params) Cut(tok Tokenizer, text string, anchored bool) (windows [][]int32, nTokens int) {
	windows, nTokens, _ = p.CutStop(tok, text, anchored, nil)
	return windows, nTokens
}

// pieceBytes is how much text CutStop tokenizes between two calls of its stop function: small
// enough that a cancelled request stops within milliseconds, large enough to cost nothing.
const pieceBytes = 64 << 10

// CutStop is Cut for a caller that may give up part way (a request that timed out, a client
// gone, a token bound passed): with a stop function, the text is tokenized piece by piece (a
// line, or about 64 KiB of a longer one ending at a space) and stop is called after each piece
// with the content tokens so far; its error ends the cut and is returned. Tokens never span
// whitespace, so the pieces' ids are exactly the whole text's. A nil stop never stops.
func (p Params) CutStop(tok Tokenizer, text string, anchored bool, stop func(nTokens int) error) (windows [][]int32, nTokens int, err error) {
	if !anchored {
		ids, err := encode(tok, nil, text, stop)
		if err != nil {
			return nil, len(ids), err
		}
		return p.Windows(ids, tok.CLS(), tok.SEP()), len(ids), nil
	}
	// Tokens never span a newline, so paragraph by paragraph gives the same ids as the whole
	// text, with the boundaries the windows are anchored to.
	paras := Paragraphs(text)
	perPara := make([][]int32, len(paras))
	var ids []int32
	for i, para := range paras {
		start := len(ids)
		if ids, err = encode(tok, ids, para, stop); err != nil {
			return nil, len(ids), err
		}
		perPara[i] = ids[start:len(ids):len(ids)]
	}
	return p.AnchoredWindows(perPara, tok.CLS(), tok.SEP()), len(ids), nil
}

// encode appends text's ids to dst, in pieces with a stop check after each when stop is set.
func encode(tok Tokenizer, dst []int32, text string, stop func(int) error) ([]int32, error) {
	if stop == nil {
		return tok.AppendEncode(dst, text), nil
	}
	for text != "" {
		n := len(text)
		if n > pieceBytes {
			// End the piece at a newline, else at a space; text without either is taken whole
			// (a run of 64 KiB without a space is one word, and the tokenizer makes it [UNK]).
			if i := strings.LastIndexByte(text[:pieceBytes], '\n'); i > 0 {
				n = i + 1
			} else if i := strings.LastIndexByte(text[:pieceBytes], ' '); i > 0 {
				n = i + 1
			} else if i := strings.IndexAny(text[pieceBytes:], " \n"); i >= 0 {
				n = pieceBytes + i + 1
			}
		}
		dst = tok.AppendEncode(dst, text[:n])
		text = text[n:]
		if err := stop(len(dst)); err != nil {
			return dst, err
		}
	}
	return dst, nil
}
