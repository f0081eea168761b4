package connectors_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/jsonl"
	"github.com/reignpipe/reignpipe/connectors/vectorfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// The loop every runner writes around a Source: a document is acked once what was derived from
// it is durable, a bad input is acked with its reason (after it went to the dead-letter output),
// and io.EOF ends the input.
func ExampleSource() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "docs.jsonl")
	_ = os.WriteFile(path, []byte(`{"id": "a", "text": "first document"}
{"id": "b", "text": 
{"id": "c", "text": "third document"}
`), 0o644)

	var src connectors.Source
	src, err := jsonl.Open(jsonl.Options{Path: path, Source: "docs"})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for {
		doc, ack, err := src.Read(ctx)
		var bad *connectors.BadInputError
		switch {
		case errors.Is(err, io.EOF):
			fmt.Println("documents read:", src.Stats().Read) // bad inputs are not documents
			_ = src.Close(ctx)
			return
		case errors.As(err, &bad):
			fmt.Println("dead-lettered:", bad.Position)
			_ = ack(ctx, bad)
		case err != nil:
			fmt.Println("the run ends:", err)
			return
		default:
			fmt.Println("document:", doc.ID)
			_ = ack(ctx, nil)
		}
	}
	// Output:
	// document: docs:a
	// dead-lettered: docs.jsonl line 2
	// document: docs:c
	// documents read: 2
}

// A Sink promises nothing until Flush returns, and writing a document again is harmless:
// readers keep the newest version of each DocID.
func ExampleSink() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)

	var sink connectors.Sink
	sink, err := vectorfile.NewJSONL(vectorfile.JSONLOptions{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for _, v := range []schemas.DocVector{
		{DocID: "docs:a", Version: "1", Space: "example", Vector: []float32{1, 0}},
		{DocID: "docs:a", Version: "2", Space: "example", Vector: []float32{0, 1}},
		{DocID: "docs:a", Version: "2", Space: "example", Vector: []float32{0, 1}}, // redelivered
	} {
		if err := sink.Write(ctx, v); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := sink.Flush(ctx); err != nil { // now durable: the inputs may be acked
		fmt.Println(err)
		return
	}
	_ = sink.Close(ctx)

	latest, _ := vectorfile.Latest(dir)
	fmt.Println(len(latest), latest["docs:a"].Version, latest["docs:a"].Vector)
	// Output:
	// 1 2 [0 1]
}
