package connectors

import (
	"context"
	"errors"
	"io"

	"github.com/reignpipe/reignpipe/schemas"
)

// Each reads src to its end for a tool or a test (the runners keep their own loops): fn gets
// every document in order, and a false from it stops the reading early. Bad inputs are skipped
// and counted, and every input is acked (bad ones with their reason) as it is handled, which
// only suits sources whose checkpoint nothing reads afterwards.
func Each(ctx context.Context, src Source, fn func(schemas.Document) (more bool, err error)) (bad int, err error) {
	for {
		d, ack, err := src.Read(ctx)
		if errors.Is(err, io.EOF) {
			return bad, nil
		}
		var b *BadInputError
		if errors.As(err, &b) {
			bad++
			if ack != nil {
				_ = ack(ctx, b)
			}
			continue
		}
		if err != nil {
			return bad, err
		}
		more, err := fn(d)
		if ack != nil {
			_ = ack(ctx, nil)
		}
		if err != nil || !more {
			return bad, err
		}
	}
}
