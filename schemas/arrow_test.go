package schemas

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
)

func TestSchemas(t *testing.T) {
	tests := []struct {
		name   string
		schema *arrow.Schema
		embCol string
		fields []string
		ver    string
	}{
		{"chunk", ChunkSchema(4, map[string]string{MetaGNFingerprint: "fp", MetaDim: "999"}), ColEmbedding,
			[]string{"key", "doc_id", "chunk_index", "n_tokens", "embedding"}, "1"},
		{"vector", VectorSchema(4, map[string]string{MetaGNFingerprint: "fp"}), ColVector,
			[]string{"doc_id", "title", "source", "version", "n_chunks", "n_tokens", "content_hash", "space", "vector", "deleted"}, "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.schema
			if s.NumFields() != len(tc.fields) {
				t.Fatalf("fields = %d, want %d", s.NumFields(), len(tc.fields))
			}
			for i, name := range tc.fields {
				if f := s.Field(i); f.Name != name || f.Nullable {
					t.Errorf("field %d = %s nullable=%v, want %s non-null", i, f.Name, f.Nullable, name)
				}
			}
			idx := s.FieldIndices(tc.embCol)
			if len(idx) != 1 {
				t.Fatalf("no %s column", tc.embCol)
			}
			ft, ok := s.Field(idx[0]).Type.(*arrow.FixedSizeListType)
			if !ok || ft.Len() != 4 || ft.Elem().ID() != arrow.FLOAT32 || ft.ElemField().Nullable {
				t.Errorf("embedding type = %v", s.Field(idx[0]).Type)
			}
			md := s.Metadata()
			for k, want := range map[string]string{MetaSchemaVersion: tc.ver, MetaDim: "4", MetaGNFingerprint: "fp"} {
				if i := md.FindKey(k); i < 0 || md.Values()[i] != want {
					t.Errorf("metadata %s missing or wrong (want %q): %v", k, want, md)
				}
			}
		})
	}
}
