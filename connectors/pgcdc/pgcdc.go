// Package pgcdc is the postgres source (source.type: postgres): a PostgreSQL table as a stream
// of documents, an initial snapshot of its rows and then its inserts, updates and deletes
// through logical replication (the pgoutput plugin, a replication slot and a publication of
// the table, both created when missing).
//
// Consistency. The slot is created exporting a snapshot, and the table is read in a
// transaction that imports it (SET TRANSACTION SNAPSHOT): every change committed after the
// snapshot is in the slot's stream, none before, so nothing is lost or read twice.
//
// Versions (Version): a row read by the snapshot gets the slot's position at the snapshot; a
// change gets its transaction's commit position followed by its 10-digit ordinal within the
// transaction. All digits, so schemas.CompareVersions orders them as numbers: a row's changes
// in the order the server committed them, every change after the snapshot's rows.
//
// Durability (invariant 4). The slot's confirmed position, which lets the server discard the
// log before it, is advanced (a standby status update) only over transactions whose every
// change was acked, that is durable downstream: acks arrive out of order, and the position
// follows the longest acked prefix of the stream. A crash while streaming resumes from the
// slot: the server sends again every transaction after the confirmed position.
//
// A crash during the snapshot restarts the snapshot. The slot is kept, so no change after it
// is lost; the table is read again as it is then, each row labelled with the slot's position,
// and the stream from the slot replays every change since: a row the second read sees newer
// than the label converges to the same text when its change arrives, and unchanged rows cost
// no embedding (the chunk cache has their windows). Only once every snapshot row is durable is
// the snapshot recorded as done, in the source's state file in run.state_dir (with
// --from-scratch it is forgotten, and the table read again).
package pgcdc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/internal/atomicfile"
	"github.com/reignpipe/reignpipe/schemas"
)

// statusInterval is how often the source tells the server its position unasked: well inside
// the server's wal_sender_timeout (60s by default), even while the pipeline holds back reads.
const statusInterval = 10 * time.Second

// Options configure a Source: its keys and what the pipeline tells it besides.
type Options struct {
	Config
	// Pipeline is the pipeline's name, from which the slot and publication names derive.
	Pipeline string
	// Source is the id prefix and schemas.Document.Source; "": the table's name.
	Source string
	// StateFile remembers that the snapshot is done; "": nothing is remembered, and every
	// open reads the table again.
	StateFile string
	Logger    *slog.Logger
}

// Source follows one table. It is a connectors.Source that keeps its own position (the slot).
type Source struct {
	o         Options
	slot, pub string
	tab       *table
	conn      *pgx.Conn      // queries: the snapshot, rows whose text the log left out
	repl      *pgconn.PgConn // the replication connection
	tr        *tracker
	log       *slog.Logger

	out    chan item
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{} // closed when the producer returned; err is then set
	err    error
	kick   chan struct{} // asks the status goroutine to report now
	pos    atomic.Uint64 // the flushed position the status goroutine reports
	// streaming: the replication stream started (a position may be reported).
	streaming atomic.Bool
	saveMu    sync.Mutex
	saved     bool // the snapshot's completion is in the state file

	mu    sync.Mutex
	stats connectors.SourceStats
	text  textpolicy.Counts
}

type item struct {
	doc schemas.Document
	ack connectors.AckFunc
	err error
}

var (
	_ connectors.Source            = (*Source)(nil)
	_ connectors.SelfCheckpointing = (*Source)(nil)
	_ connectors.AckFlusher        = (*Source)(nil)
)

// Open connects under ctx, checks the server, the role and the table, creates the publication
// and the slot when missing, and starts reading.
func Open(ctx context.Context, o Options) (_ *Source, err error) {
	if err := o.Config.Validate(func(key, format string, args ...any) error {
		return fmt.Errorf("source."+key+": "+format, args...)
	}); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg, err := pgx.ParseConfig(o.DSN)
	if err != nil {
		// The DSN is not repeated: a malformed one cannot be trusted to have its password hidden.
		return nil, fmt.Errorf("source.dsn is not a valid PostgreSQL connection string: use a URL postgres://USER@HOST:PORT/DATABASE or key=value pairs (host=... dbname=... user=...)")
	}
	s := &Source{o: o, tr: newTracker(), log: o.Logger, out: make(chan item, 64), done: make(chan struct{}),
		kick: make(chan struct{}, 1), text: textpolicy.Counts{}, stats: connectors.SourceStats{Skipped: map[string]int64{}}}
	s.slot, s.pub = o.Config.names(o.Pipeline)
	where := fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
	if s.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("source.dsn: cannot connect to %s: %w", where, err)
	}
	defer func() {
		if err != nil {
			s.closeConns()
		}
	}()
	if err := checkServer(ctx, s.conn); err != nil {
		return nil, err
	}
	if s.tab, err = resolveTable(ctx, s.conn, o.Config); err != nil {
		return nil, err
	}
	if s.o.Source == "" {
		s.o.Source = s.tab.name
	}
	if err := ensurePublication(ctx, s.conn, s.tab, s.pub); err != nil {
		return nil, err
	}
	rc := cfg.Config.Copy()
	rc.RuntimeParams["replication"] = "database"
	if s.repl, err = pgconn.ConnectConfig(ctx, rc); err != nil {
		return nil, fmt.Errorf("source.dsn: cannot open a replication connection to %s: %w", where, err)
	}
	plan, err := s.plan(ctx)
	if err != nil {
		return nil, err
	}
	run, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(s.done)
		s.err = s.produce(run, plan)
	}()
	return s, nil
}

// snapshotPlan is what the producer does before streaming: nothing (the snapshot is done),
// or read the table, in the exported snapshot when the slot was just created.
type snapshotPlan struct {
	read     bool
	exported string        // the snapshot to import; "": a fresh one
	label    pglogrepl.LSN // the snapshot rows' position
}

// state is the state file: the snapshot of this slot and table is durable downstream.
type state struct {
	Slot         string `json:"slot"`
	Table        string `json:"table"`
	SnapshotDone bool   `json:"snapshot_done"`
}

func (s *Source) plan(ctx context.Context) (snapshotPlan, error) {
	var st state
	if s.o.StateFile != "" {
		b, err := os.ReadFile(s.o.StateFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return snapshotPlan{}, err
		}
		if err == nil {
			if err := json.Unmarshal(b, &st); err != nil {
				return snapshotPlan{}, fmt.Errorf("source: the state file %s is damaged (%v); remove it to read the table again", s.o.StateFile, err)
			}
		}
	}
	done := st.SnapshotDone && st.Slot == s.slot && st.Table == s.tab.quoted
	slot, err := lookupSlot(ctx, s.conn, s.slot)
	if err != nil {
		return snapshotPlan{}, err
	}
	if slot != nil {
		if done {
			s.saved = true
			return snapshotPlan{}, nil
		}
		lsn, err := pglogrepl.ParseLSN(*slot.confirmed)
		if err != nil {
			return snapshotPlan{}, fmt.Errorf("source.slot: slot %s: %w", s.slot, err)
		}
		s.log.Info("postgres source: the snapshot did not finish; reading the table again, then the slot's changes since", "table", s.tab.quoted, "slot", s.slot, "from", lsn)
		return snapshotPlan{read: true, label: lsn}, nil
	}
	if done {
		s.log.Warn("postgres source: the slot is gone, and with it the changes it kept; reading the table again (rows deleted meanwhile stay in the outputs)", "slot", s.slot)
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, s.repl, s.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return snapshotPlan{}, fmt.Errorf("source.slot: creating replication slot %s: %w", s.slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return snapshotPlan{}, fmt.Errorf("source.slot: slot %s: %w", s.slot, err)
	}
	return snapshotPlan{read: true, exported: res.SnapshotName, label: lsn}, nil
}

// Read returns the next document: a snapshot row, then each change as it commits. It blocks
// until one is there or ctx ends.
func (s *Source) Read(ctx context.Context) (schemas.Document, connectors.AckFunc, error) {
	select {
	case it := <-s.out:
		return it.doc, it.ack, it.err
	case <-ctx.Done():
		return schemas.Document{}, nil, ctx.Err()
	case <-s.done:
		select { // what the producer handed over before it stopped comes first
		case it := <-s.out:
			return it.doc, it.ack, it.err
		default:
		}
		if s.err == nil {
			return schemas.Document{}, nil, errors.New("source: stopped")
		}
		return schemas.Document{}, nil, s.err
	}
}

// SelfCheckpointing: the slot is the position; nothing is skipped on resume.
func (s *Source) SelfCheckpointing() bool { return true }

// FlushAcks makes the acked prefix the slot's confirmed position (sent at once by the status
// goroutine) and, once every snapshot row is acked, records the snapshot as done.
func (s *Source) FlushAcks(ctx context.Context) error {
	if err := s.advance(); err != nil {
		return err
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

func (s *Source) advance() error {
	pos, snapshotDone := s.tr.advance()
	if snapshotDone {
		if err := s.saveState(); err != nil {
			return err
		}
	}
	for { // FlushAcks and the status goroutine both advance: the position never goes back
		old := s.pos.Load()
		if uint64(pos) <= old || s.pos.CompareAndSwap(old, uint64(pos)) {
			return nil
		}
	}
}

func (s *Source) saveState() error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	if s.saved || s.o.StateFile == "" {
		return nil
	}
	b, _ := json.Marshal(state{Slot: s.slot, Table: s.tab.quoted, SnapshotDone: true})
	if err := atomicfile.Write(s.o.StateFile, b); err != nil {
		return fmt.Errorf("source: recording the snapshot as done: %w", err)
	}
	s.saved = true
	return nil
}

// Stats counts documents handed out (deletions among them) and rows passed over.
func (s *Source) Stats() connectors.SourceStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Skipped = make(map[string]int64, len(s.stats.Skipped))
	for k, v := range s.stats.Skipped {
		st.Skipped[k] = v
	}
	st.Text = make(map[string]int64, len(s.text))
	for k, v := range s.text {
		st.Text[k] = v
	}
	return st
}

// Close stops reading, reports the acked position a last time and closes the connections.
// Changes not acked by then are sent again to the next run.
func (s *Source) Close(ctx context.Context) error {
	s.cancel()
	s.wg.Wait()
	var err error
	if s.streaming.Load() {
		if err = s.advance(); err == nil {
			err = s.sendStatus()
		}
	}
	s.closeConns()
	return err
}

func (s *Source) closeConns() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s.repl != nil {
		s.repl.Close(ctx)
	}
	if s.conn != nil {
		s.conn.Close(ctx)
	}
}

// Slot and Publication are the names the source follows.
func (s *Source) Slot() string        { return s.slot }
func (s *Source) Publication() string { return s.pub }
