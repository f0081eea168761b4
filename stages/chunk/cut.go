package chunk

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
	if !anchored {
		ids := tok.AppendEncode(nil, text)
		return p.Windows(ids, tok.CLS(), tok.SEP()), len(ids)
	}
	// Tokens never span a newline, so paragraph by paragraph gives the same ids as the whole
	// text, with the boundaries the windows are anchored to.
	paras := Paragraphs(text)
	perPara := make([][]int32, len(paras))
	var ids []int32
	for i, para := range paras {
		start := len(ids)
		ids = tok.AppendEncode(ids, para)
		perPara[i] = ids[start:len(ids):len(ids)]
	}
	return p.AnchoredWindows(perPara, tok.CLS(), tok.SEP()), len(ids)
}
