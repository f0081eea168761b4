package train

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// Sequence is one row of the sequences index: a document (side "c") or query (side "q") and
// its window keys in order.
type Sequence struct {
	DocID, Side string
	Keys        []uint64
}

// WriteSequences writes the sequences index the trainer reads (columns doc_id, side, keys and
// the space in the metadata) and returns the number of windows listed. The file appears
// complete or not at all.
func WriteSequences(path string, sp schemas.Space, seqs []Sequence) (windows int64, err error) {
	meta := map[string]string{
		schemas.MetaGNFingerprint: sp.Fingerprint, schemas.MetaK: strconv.Itoa(sp.K),
		schemas.MetaS: strconv.Itoa(sp.S), schemas.MetaDim: strconv.Itoa(sp.Dim),
	}
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "doc_id", Type: arrow.BinaryTypes.String},
		{Name: "side", Type: arrow.BinaryTypes.String},
		{Name: "keys", Type: arrow.ListOf(arrow.PrimitiveTypes.Uint64)},
	}, func() *arrow.Metadata { m := arrow.MetadataFrom(meta); return &m }())
	mem := memory.DefaultAllocator
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	ids, sides := b.Field(0).(*array.StringBuilder), b.Field(1).(*array.StringBuilder)
	lb := b.Field(2).(*array.ListBuilder)
	kb := lb.ValueBuilder().(*array.Uint64Builder)
	for _, s := range seqs {
		if len(s.Keys) == 0 {
			return 0, fmt.Errorf("train: sequence %s:%s has no window keys", s.Side, s.DocID)
		}
		ids.Append(s.DocID)
		sides.Append(s.Side)
		lb.Append(true)
		kb.AppendValues(s.Keys, nil)
		windows += int64(len(s.Keys))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf,
		parquet.NewWriterProperties(parquet.WithAllocator(mem), parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema(), pqarrow.WithAllocator(mem)))
	if err != nil {
		return 0, err
	}
	if err := fw.Write(rec); err != nil {
		_ = fw.Close()
		return 0, err
	}
	if err := fw.Close(); err != nil {
		return 0, err
	}
	if err := atomicfile.Write(path, buf.Bytes()); err != nil {
		return 0, err
	}
	return windows, nil
}

// RunTrainer runs `python -m reigntrain ARGS` with dir on PYTHONPATH. On cancellation the
// trainer gets SIGINT, finishes its line and exits; a hung one is killed after 30s.
func RunTrainer(ctx context.Context, py, dir string, args []string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, py, append([]string{"-m", "reigntrain"}, args...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+JoinPath(dir, os.Getenv("PYTHONPATH")), "PYTHONUNBUFFERED=1")
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("trainer (%s -m reigntrain, PYTHONPATH=%s): %w", py, dir, err)
	}
	return nil
}
