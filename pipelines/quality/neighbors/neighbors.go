// Package neighbors finds the documents nearest to one document of a vector sink's output:
// dot product of the L2-normalised vectors, the document itself excluded, ranked by
// retrieval.TopK so that neighbours and the evaluator never order a tie differently (best
// score first, ties by ascending doc id).
package neighbors

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/pipelines"
	"github.com/reignpipe/reignpipe/pipelines/quality/retrieval"
	"github.com/reignpipe/reignpipe/schemas"
)

// Of picks the query document: DocID (with or without its source prefix, when that is
// unambiguous), else Title (see ResolveTitle), else the first document by id.
type Of struct {
	DocID, Title string
}

// Hit is one neighbour.
type Hit struct {
	DocID, Title string
	Score        float64
}

// Result is the query document and its neighbours, best first.
type Result struct {
	Query schemas.DocVector
	Among int // documents in the output, the query included
	Hits  []Hit
}

// Find ranks the latest vector of every document in the sink directory dir against the one of
// picks and returns the k best. Vectors of two spaces are never compared.
func Find(dir string, of Of, k int) (*Result, error) {
	if k < 1 {
		return nil, errors.New("neighbors: --k must be >= 1")
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("neighbors: --vectors %s is not a folder (give a vector sink's sinks[].dir: its parquet or jsonl part files)", dir)
	}
	latest, err := vectorfile.Latest(dir)
	if err != nil {
		return nil, err
	}
	if len(latest) == 0 {
		return nil, fmt.Errorf("neighbors: no vectors in %s", dir)
	}
	ids := slices.Sorted(maps.Keys(latest))
	var q schemas.DocVector
	switch {
	case of.DocID != "":
		id, err := ResolveID(ids, of.DocID)
		if err != nil {
			return nil, fmt.Errorf("neighbors: %w in %s", err, dir)
		}
		q = latest[id]
	case of.Title != "":
		titles := make([]string, len(ids))
		for i, id := range ids {
			titles[i] = latest[id].Title
		}
		id, err := ResolveTitle(ids, titles, of.Title)
		if err != nil {
			return nil, fmt.Errorf("neighbors: %w in %s", err, dir)
		}
		q = latest[id]
	default:
		q = latest[ids[0]]
	}
	corpus := make([][]float32, len(ids))
	for i, id := range ids {
		v := latest[id]
		if v.Space != q.Space {
			return nil, fmt.Errorf("neighbors: %s is in space %s, %s in %s: vectors of two spaces are not comparable", q.DocID, q.Space, id, v.Space)
		}
		corpus[i] = v.Vector
	}
	hits, err := retrieval.TopK(q.Vector, corpus, ids, k, q.DocID)
	if err != nil {
		return nil, err
	}
	res := &Result{Query: q, Among: len(latest), Hits: make([]Hit, len(hits))}
	for i, h := range hits {
		res.Hits[i] = Hit{DocID: h.ID, Title: latest[h.ID].Title, Score: h.Score}
	}
	return res, nil
}

// maxListed is how many candidates a message lists.
const maxListed = 5

// ResolveID finds the stored id a user meant among ids (sorted): the id itself, or the one id
// that ends in ":"+want -- ids are "<source>:<id>", and a user often knows only the id in the
// input ("bread" for corpus:bread). Several such ids, or none, are an error that lists the
// candidates: the ids with that local part, else the nearest id.
func ResolveID(ids []string, want string) (string, error) {
	if _, ok := slices.BinarySearch(ids, want); ok {
		return want, nil
	}
	var prefixed []string
	for _, id := range ids {
		if strings.HasSuffix(id, ":"+want) {
			prefixed = append(prefixed, id)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0], nil
	}
	if len(prefixed) > 1 {
		return "", fmt.Errorf("%q is the id of several documents: give it with its source, %s", want, orList(prefixed))
	}
	// A wrong source prefix (wiki:bread for corpus:bread), or a typo.
	local := want
	if _, after, ok := strings.Cut(want, ":"); ok {
		local = after
	}
	var same []string
	for _, id := range ids {
		if local != want && strings.HasSuffix(id, ":"+local) {
			same = append(same, id)
		}
	}
	if len(same) == 0 {
		if near := pipelines.Nearest(want, ids); near != "" {
			same = []string{near}
		} else if near := nearestLocal(ids, local); near != "" {
			same = []string{near}
		}
	}
	msg := fmt.Sprintf("no document %q", want)
	if len(same) > 0 {
		msg += "; did you mean " + orList(same) + "?"
	} else if len(ids) > 0 {
		msg += fmt.Sprintf(" (ids look like %s)", ids[0])
	}
	return "", errors.New(msg)
}

// nearestLocal is the id whose part after the source prefix is nearest to local.
func nearestLocal(ids []string, local string) string {
	locals := make([]string, 0, len(ids))
	byLocal := map[string]string{}
	for _, id := range ids {
		_, l, ok := strings.Cut(id, ":")
		if !ok {
			continue
		}
		if _, dup := byLocal[l]; !dup {
			locals = append(locals, l)
			byLocal[l] = id
		}
	}
	if near := pipelines.Nearest(local, locals); near != "" {
		return byLocal[near]
	}
	return ""
}

// ResolveTitle finds the document a title names among ids (sorted) and their titles: the one
// whose title equals want ignoring case, else the one whose title contains it ignoring case.
// Several documents matching either way, or none, are an error listing up to five candidates.
func ResolveTitle(ids, titles []string, want string) (string, error) {
	var exact, within []int
	w := strings.ToLower(want)
	for i, t := range titles {
		switch lt := strings.ToLower(t); {
		case lt == w:
			exact = append(exact, i)
		case strings.Contains(lt, w):
			within = append(within, i)
		}
	}
	pick, how := exact, "are titled"
	if len(exact) == 0 {
		pick, how = within, "have a title containing"
	}
	switch len(pick) {
	case 0:
		return "", fmt.Errorf("no document titled %q (titles are matched ignoring case, whole or in part)", want)
	case 1:
		return ids[pick[0]], nil
	}
	var cands []string
	for _, i := range pick[:min(len(pick), maxListed)] {
		cands = append(cands, fmt.Sprintf("%s %q", ids[i], titles[i]))
	}
	more := ""
	if len(pick) > maxListed {
		more = fmt.Sprintf(" and %d more", len(pick)-maxListed)
	}
	return "", fmt.Errorf("%d documents %s %q: %s%s; give one with --doc ID, or a longer --title", len(pick), how, want, strings.Join(cands, ", "), more)
}

// orList writes up to five ids as "a, b or c" (and how many more).
func orList(ids []string) string {
	shown := ids[:min(len(ids), maxListed)]
	s := shown[0]
	if len(shown) > 1 {
		s = strings.Join(shown[:len(shown)-1], ", ") + " or " + shown[len(shown)-1]
	}
	if len(ids) > maxListed {
		s += fmt.Sprintf(" (and %d more)", len(ids)-maxListed)
	}
	return s
}
