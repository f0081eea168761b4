package pgvector

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	pgv "github.com/pgvector/pgvector-go"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/schemas"
)

// Vector returns the stored row of docID in space (Space and Vector set), or found=false. On a
// miss, near lists up to three stored ids that end in ":"+docID: sources prefix ids with their
// file or corpus name, and users type the bare id.
func (s *Searcher) Vector(ctx context.Context, space, docID string) (v *schemas.DocVector, near []string, found bool, err error) {
	info, err := s.space(ctx, space)
	if err != nil {
		return nil, nil, false, err
	}
	var (
		out  schemas.DocVector
		hash int64
		emb  pgv.Vector
	)
	err = s.pool.QueryRow(ctx, "SELECT doc_id, title, source, version, content_hash, n_chunks, n_tokens, embedding FROM "+ident(info.Table)+" WHERE doc_id = $1", docID).
		Scan(&out.DocID, &out.Title, &out.Source, &out.Version, &hash, &out.NChunks, &out.NTokens, &emb)
	if errors.Is(err, pgx.ErrNoRows) {
		rows, err := s.pool.Query(ctx, "SELECT doc_id FROM "+ident(info.Table)+" WHERE right(doc_id, $2) = $1 ORDER BY doc_id LIMIT 3", ":"+docID, len(docID)+1)
		if err == nil {
			near, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return nil, nil, false, s.wrap(err)
		}
		return nil, near, false, nil
	}
	if err != nil {
		return nil, nil, false, s.wrap(err)
	}
	out.ContentHash, out.Space, out.Vector = uint64(hash), space, emb.Slice()
	return &out, nil, true, nil
}

// Lookup is Vector as a connectors.VectorStore answers it: a doc id the tables do not hold is a
// *connectors.NotFoundError naming the ids it probably meant.
func (s *Searcher) Lookup(ctx context.Context, space, docID string) (*schemas.DocVector, error) {
	v, near, found, err := s.Vector(ctx, space, docID)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, &connectors.NotFoundError{ID: docID, Where: s.Name(), Near: near}
	}
	return v, nil
}
