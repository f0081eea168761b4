package schemas

import (
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Keys of the Arrow schema (and so Parquet file) key-value metadata. Readers use them to refuse
// files from another GN space before comparing any vector.
const (
	MetaSchemaVersion = "reignpipe.schema_version"
	MetaGNFingerprint = "reignpipe.gn_fingerprint"
	MetaK             = "reignpipe.k"
	MetaS             = "reignpipe.s"
	MetaDim           = "reignpipe.dim"
	MetaGNDim         = "reignpipe.gn_dim" // set when the gn_vector column is present
	// ChunkSchemaVersion is a cache shard's schema_version; a shard of another one is refused.
	ChunkSchemaVersion = "1"
	// VectorSchemaVersion is a vector part's schema_version. 2 added the deleted column;
	// readers keep reading version-1 parts, whose rows are all live.
	VectorSchemaVersion = "2"
)

// Column names shared by the writers and the readers of the on-disk schemas.
const (
	ColKey         = "key"
	ColDocID       = "doc_id"
	ColChunkIndex  = "chunk_index"
	ColNTokens     = "n_tokens"
	ColEmbedding   = "embedding"
	ColTitle       = "title"
	ColSource      = "source"
	ColVersion     = "version"
	ColNChunks     = "n_chunks"
	ColContentHash = "content_hash"
	ColSpace       = "space"
	ColVector      = "vector"
	ColGNSpace     = "gn_space"
	ColGNVector    = "gn_vector"
	ColDeleted     = "deleted"
)

// EmbeddingType is fixed_size_list<float32 not null>[dim]. Items are declared non-null so that
// readers (pyarrow, DuckDB) see dense vectors and never have to handle a null component.
func EmbeddingType(dim int) *arrow.FixedSizeListType {
	return arrow.FixedSizeListOfNonNullable(int32(dim), arrow.PrimitiveTypes.Float32)
}

// ChunkSchema is the schema of a chunk-embedding cache shard: one row per embedded window.
// dim must be positive (callers validate it; the schema cannot express an error). meta is
// copied; schema_version and dim are always set from the arguments so they cannot disagree
// with the columns.
func ChunkSchema(dim int, meta map[string]string) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: ColKey, Type: arrow.PrimitiveTypes.Uint64},
		{Name: ColDocID, Type: arrow.BinaryTypes.String},
		{Name: ColChunkIndex, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColNTokens, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColEmbedding, Type: EmbeddingType(dim)},
	}, schemaMeta(ChunkSchemaVersion, dim, meta))
}

// VectorSchema is the schema of published document vectors (one row per DocVector), or of a
// deletion's tombstone: deleted true, with doc_id, source and version of the deletion, space
// "" (a deletion applies to every space), title "", the counts and content_hash 0 and the
// vector all zeros (the column is a non-null fixed_size_list, so every reader parses the row
// as it parses any other). content_hash is the xxhash64 of the tokenized text, stored unsigned.
func VectorSchema(dim int, meta map[string]string) *arrow.Schema {
	return arrow.NewSchema([]arrow.Field{
		{Name: ColDocID, Type: arrow.BinaryTypes.String},
		{Name: ColTitle, Type: arrow.BinaryTypes.String},
		{Name: ColSource, Type: arrow.BinaryTypes.String},
		{Name: ColVersion, Type: arrow.BinaryTypes.String},
		{Name: ColNChunks, Type: arrow.PrimitiveTypes.Int32},
		{Name: ColNTokens, Type: arrow.PrimitiveTypes.Int64},
		{Name: ColContentHash, Type: arrow.PrimitiveTypes.Uint64},
		{Name: ColSpace, Type: arrow.BinaryTypes.String},
		{Name: ColVector, Type: EmbeddingType(dim)},
		{Name: ColDeleted, Type: arrow.FixedWidthTypes.Boolean},
	}, schemaMeta(VectorSchemaVersion, dim, meta))
}

// VectorSchemaWithGN is VectorSchema plus the GN mean-pool companion columns (gn_space,
// gn_vector fixed_size_list<float32>[gnDim]) written beside REIGN vectors.
func VectorSchemaWithGN(dim, gnDim int, meta map[string]string) *arrow.Schema {
	base := VectorSchema(dim, meta)
	fields := append(base.Fields(),
		arrow.Field{Name: ColGNSpace, Type: arrow.BinaryTypes.String},
		arrow.Field{Name: ColGNVector, Type: EmbeddingType(gnDim)})
	m := base.Metadata()
	keys, vals := append(m.Keys(), MetaGNDim), append(m.Values(), strconv.Itoa(gnDim))
	md := arrow.NewMetadata(keys, vals)
	return arrow.NewSchema(fields, &md)
}

func schemaMeta(version string, dim int, meta map[string]string) *arrow.Metadata {
	m := make(map[string]string, len(meta)+2)
	for k, v := range meta {
		m[k] = v
	}
	m[MetaSchemaVersion] = version
	m[MetaDim] = strconv.Itoa(dim)
	md := arrow.MetadataFrom(m)
	return &md
}
