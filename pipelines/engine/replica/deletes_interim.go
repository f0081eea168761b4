package replica

import (
	"context"
	"errors"

	"github.com/reignpipe/reignpipe/schemas"
)

// Delete is not applied yet (interim, replaced by the deletes work).
func (s *OrderedVectorSink) Delete(ctx context.Context, d schemas.Deletion) error {
	return errors.New("this sink does not apply deletions yet")
}

// DeleteManifest is not applied yet (interim, replaced by the deletes work).
func (p *Publisher) DeleteManifest(d schemas.Deletion) error {
	return errors.New("the cluster store does not apply deletions yet")
}
