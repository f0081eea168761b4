package reign

import (
	"errors"
	"fmt"
	"math"
	"sync"

	ort "github.com/yalue/onnxruntime_go"

	"github.com/reignpipe/reignpipe/stages/aggregate"
	"github.com/reignpipe/reignpipe/stages/gn"
)

var _ aggregate.Aggregator = (*Stage)(nil)

// ErrClosed is returned by calls on a closed Stage.
var ErrClosed = errors.New("reign: stage closed")

// StageOptions picks where the encoder runs; the fields mean what they mean for the GN.
type StageOptions struct {
	Provider       string // "cpu" (default) or "cuda:N"
	IntraOpThreads int    // 0 = ORT default
	InterOpThreads int    // 0 = ORT default
	CheckpointID   string // names the space; "" = Checkpoint.ID()
}

// Stage is the REIGN aggregator: one ONNX Runtime session over the graph built from a
// checkpoint. Aggregate and AggregateBatch are safe for concurrent use (ORT runs a session
// concurrently; each call owns its tensors).
type Stage struct {
	gnDim, dim, maxPositions int
	space                    string

	mu   sync.RWMutex // Run under RLock, Close under Lock
	sess *ort.DynamicAdvancedSession
}

// NewStage builds the encoder graph and opens it as a session in rt.
func NewStage(rt *gn.Runtime, ck *Checkpoint, opts StageOptions) (*Stage, error) {
	if rt == nil || ck == nil {
		return nil, errors.New("reign: NewStage needs a runtime and a checkpoint")
	}
	id := opts.CheckpointID
	if id == "" {
		id = ck.ID()
	}
	if id == "" {
		return nil, errors.New("reign: checkpoint has no id (not from Load/FromBytes) and none was given")
	}
	sess, err := rt.NewSessionFromBytes(BuildONNX(ck), []string{InputChunks, InputMask}, []string{OutputVector},
		opts.Provider, opts.IntraOpThreads, opts.InterOpThreads)
	if err != nil {
		return nil, fmt.Errorf("reign: %w", err)
	}
	return &Stage{
		gnDim:        ck.GNDim,
		dim:          ck.Config.HiddenSize,
		maxPositions: ck.MaxPositions,
		space:        "reign:" + id,
		sess:         sess,
	}, nil
}

// Space is "reign:" + the checkpoint id.
func (s *Stage) Space() string { return s.space }

// Dim is the hidden size.
func (s *Stage) Dim() int { return s.dim }

// InputDim is the GN embedding dimension the checkpoint expects.
func (s *Stage) InputDim() int { return s.gnDim }

// Aggregate runs one document.
func (s *Stage) Aggregate(chunks [][]float32, out []float32) error {
	return s.AggregateBatch([][][]float32{chunks}, [][]float32{out})
}

// AggregateBatch runs documents of any chunk counts in one pass, padding each to the longest
// and masking the padding out of attention and pooling, so the vectors match one-by-one runs.
func (s *Stage) AggregateBatch(docs [][][]float32, out [][]float32) error {
	if len(docs) == 0 {
		return errors.New("reign: empty batch")
	}
	if len(out) != len(docs) {
		return fmt.Errorf("reign: %d outputs for %d documents", len(out), len(docs))
	}
	nmax := 0
	for d, doc := range docs {
		if len(doc) == 0 {
			return fmt.Errorf("reign: document %d has no chunks", d)
		}
		if s.maxPositions > 0 && len(doc) > s.maxPositions {
			return fmt.Errorf("reign: document %d has %d chunks, the checkpoint's absolute positions cover %d", d, len(doc), s.maxPositions)
		}
		if len(out[d]) != s.dim {
			return fmt.Errorf("reign: output %d has %d dims, want %d", d, len(out[d]), s.dim)
		}
		for i, c := range doc {
			if len(c) != s.gnDim {
				return fmt.Errorf("reign: document %d chunk %d has %d dims, want %d", d, i, len(c), s.gnDim)
			}
			for _, v := range c {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return fmt.Errorf("reign: document %d chunk %d has a non-finite value", d, i)
				}
			}
		}
		nmax = max(nmax, len(doc))
	}
	B, G := len(docs), s.gnDim
	chunks := make([]float32, B*nmax*G)
	mask := make([]float32, B*nmax)
	for d, doc := range docs {
		for i, c := range doc {
			copy(chunks[(d*nmax+i)*G:], c)
			mask[d*nmax+i] = 1
		}
	}
	vec, err := s.run(chunks, mask, B, nmax)
	if err != nil {
		return err
	}
	for d := range docs {
		row := vec[d*s.dim : (d+1)*s.dim]
		for _, v := range row {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return fmt.Errorf("reign: document %d: encoder produced a non-finite value", d)
			}
		}
		copy(out[d], row)
	}
	return nil
}

func (s *Stage) run(chunks, mask []float32, B, N int) ([]float32, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.sess == nil {
		return nil, ErrClosed
	}
	in, err := ort.NewTensor(ort.NewShape(int64(B), int64(N), int64(s.gnDim)), chunks)
	if err != nil {
		return nil, fmt.Errorf("reign: chunks tensor: %w", err)
	}
	defer in.Destroy()
	m, err := ort.NewTensor(ort.NewShape(int64(B), int64(N)), mask)
	if err != nil {
		return nil, fmt.Errorf("reign: mask tensor: %w", err)
	}
	defer m.Destroy()
	vec, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(B), int64(s.dim)))
	if err != nil {
		return nil, fmt.Errorf("reign: output tensor: %w", err)
	}
	defer vec.Destroy()
	if err := s.sess.Run([]ort.Value{in, m}, []ort.Value{vec}); err != nil {
		return nil, fmt.Errorf("reign: running encoder on %d documents of up to %d chunks: %w", B, N, err)
	}
	return append([]float32(nil), vec.GetData()...), nil
}

// Close destroys the session; the Runtime must outlive it. Closing twice is a no-op.
func (s *Stage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess == nil {
		return nil
	}
	err := s.sess.Destroy()
	s.sess = nil
	if err != nil {
		return fmt.Errorf("reign: destroying session: %w", err)
	}
	return nil
}
