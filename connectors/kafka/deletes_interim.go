package kafka

import (
	"context"
	"errors"

	"github.com/reignpipe/reignpipe/schemas"
)

// Delete is not applied yet (interim, replaced by the deletes work).
func (s *VectorSink) Delete(ctx context.Context, d schemas.Deletion) error {
	return errors.New("this sink does not apply deletions yet")
}
