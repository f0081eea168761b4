package schemas

// Exclude leaves the query document itself out of a search's answer: the same doc id, or with
// ByHash the same content hash (the same text under another id, e.g. a query file that is a
// corpus document).
type Exclude struct {
	DocID       string
	ContentHash uint64
	ByHash      bool
}

// Excludes says whether the stored document (id, content hash) is the query itself.
func (e Exclude) Excludes(id string, hash uint64) bool {
	return (e.DocID != "" && id == e.DocID) || (e.ByHash && hash == e.ContentHash)
}

// Hit is one answer of a search. Score is the store's similarity, higher is nearer: the dot
// product of the L2-normalised vectors for the vector files and an inner_product table, the
// cosine similarity for cosine, minus the distance for l2.
type Hit struct {
	DocID       string  `json:"doc_id"`
	Title       string  `json:"title"`
	Source      string  `json:"source,omitempty"`
	Version     string  `json:"version,omitempty"`
	ContentHash uint64  `json:"-"`
	Score       float64 `json:"score"`
}

// Answer is a vector store's answer to one query: the best hits first, ties by ascending doc id.
type Answer struct {
	Store string `json:"store"`
	Exact bool   `json:"exact"` // false: an approximate (HNSW) index answered
	// How says, in words, how the store answered: "HNSW index", "exact scan", "exact scan (no
	// HNSW index on the table yet ...)" -- what ran, not what was asked for.
	How  string `json:"how"`
	Hits []Hit  `json:"hits"`
	// Among counts the documents an exact file scan ranked, Excluded the ones it left out as
	// the query itself, OtherSpace the newest vectors in another space (an output written
	// before the aggregation changed). Zero for a database answer.
	Among      int64 `json:"among,omitempty"`
	Excluded   int64 `json:"excluded,omitempty"`
	OtherSpace int64 `json:"other_space,omitempty"`
}
