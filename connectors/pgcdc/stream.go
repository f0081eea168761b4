package pgcdc

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/reignpipe/reignpipe/connectors"
	"github.com/reignpipe/reignpipe/connectors/textpolicy"
	"github.com/reignpipe/reignpipe/schemas"
)

// Version is a document's version at log position lsn, the ord-th change of its transaction
// (0: a snapshot row): the position's decimal digits and the ordinal in 10 digits, so that
// schemas.CompareVersions, comparing all-digit versions as numbers, orders by position and
// then by ordinal. A change's position is its transaction's commit, which follows the
// snapshot's position for every transaction the slot sends.
func Version(lsn pglogrepl.LSN, ord int) string {
	return fmt.Sprintf("%d%010d", uint64(lsn), ord)
}

// produce reads the snapshot when planned, then streams the slot's changes until ctx ends.
func (s *Source) produce(ctx context.Context, p snapshotPlan) error {
	if p.read {
		if err := s.snapshot(ctx, p); err != nil {
			return err
		}
	}
	args := []string{"proto_version '1'", "publication_names '" + s.pub + "'"}
	if err := pglogrepl.StartReplication(ctx, s.repl, s.slot, 0, pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args}); err != nil {
		return fmt.Errorf("source.slot: starting replication from slot %s: %w", s.slot, err)
	}
	s.streaming.Store(true)
	select { // an empty snapshot is done at once: record it without waiting for a tick
	case s.kick <- struct{}{}:
	default:
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.reportStatus(ctx)
	}()
	return s.stream(ctx)
}

// columns is the select list of the followed columns, as text: the same output function the
// log's text values come from, so a row reads the same either way. Order: id, title (NULL
// when there is no title column), then the text columns.
func (s *Source) columns() string {
	cols := []string{pgx.Identifier{s.o.IDColumn}.Sanitize() + "::text", "NULL::text"}
	if s.o.TitleColumn != "" {
		cols[1] = pgx.Identifier{s.o.TitleColumn}.Sanitize() + "::text"
	}
	for _, c := range s.o.TextColumns {
		cols = append(cols, pgx.Identifier{c}.Sanitize()+"::text")
	}
	return strings.Join(cols, ", ")
}

// snapshot reads every row of the table in one repeatable-read transaction: the exported
// snapshot's when there is one, labelled with p.label.
func (s *Source) snapshot(ctx context.Context, p snapshotPlan) error {
	tx, err := s.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("source: starting the snapshot of %s: %w", s.tab.quoted, err)
	}
	defer tx.Rollback(context.Background())
	if p.exported != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(p.exported)); err != nil {
			return fmt.Errorf("source: importing the slot's snapshot: %w", err)
		}
	}
	rows, err := tx.Query(ctx, "SELECT "+s.columns()+" FROM "+s.tab.quoted)
	if err != nil {
		return fmt.Errorf("source: reading %s: %w", s.tab.quoted, err)
	}
	defer rows.Close()
	version := Version(p.label, 0)
	n := 0
	for rows.Next() {
		r, err := s.scan(rows.Scan)
		if err != nil {
			return fmt.Errorf("source: reading %s: %w", s.tab.quoted, err)
		}
		n++
		if r.id == nil {
			s.skip("null_id")
			continue
		}
		if err := s.emit(ctx, r, version, fmt.Sprintf("%s snapshot row %d", s.tab.quoted, n), true); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("source: reading %s: %w", s.tab.quoted, err)
	}
	rows.Close()
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("source: ending the snapshot of %s: %w", s.tab.quoted, err)
	}
	s.tr.mark(p.label, true)
	s.log.Info("postgres source: snapshot read; following the slot", "table", s.tab.quoted, "rows", n, "slot", s.slot)
	return nil
}

// row is a row's followed values; nil is NULL.
type row struct {
	id, title *string
	text      []*string
}

// emit hands the document of row r out: an upsert, or a deletion when its text is blank (a
// row without text has no vector, and must not keep an older one). A snapshot row with blank
// text is passed over as "empty".
func (s *Source) emit(ctx context.Context, r row, version, pos string, snapshot bool) error {
	s.mu.Lock()
	var parts []string
	for _, t := range r.text {
		if t != nil {
			if c := textpolicy.Clean(*t, s.text); !textpolicy.IsBlank(c) {
				parts = append(parts, c)
			}
		}
	}
	title := ""
	if r.title != nil {
		title = textpolicy.Clean(*r.title, s.text)
	}
	blank := len(parts) == 0
	if blank && snapshot {
		s.stats.Skipped["empty"]++
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	doc := schemas.Document{ID: s.o.Source + ":" + *r.id, Source: s.o.Source, Version: version, Position: pos}
	if blank {
		doc.Deleted = true
	} else {
		doc.Title, doc.Text = title, strings.Join(parts, "\n\n")
	}
	return s.hand(ctx, item{doc: doc})
}

// hand numbers it and passes it to Read, waiting while the pipeline is busy.
func (s *Source) hand(ctx context.Context, it item) error {
	seq := s.tr.take()
	it.ack = func(context.Context, error) error { s.tr.ack(seq); return nil }
	s.mu.Lock()
	s.stats.Read++
	s.stats.BytesRead += int64(len(it.doc.Text))
	s.mu.Unlock()
	select {
	case s.out <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Source) skip(reason string) {
	s.mu.Lock()
	s.stats.Skipped[reason]++
	s.mu.Unlock()
}

// reportStatus tells the server the flushed position every statusInterval and when asked
// (FlushAcks, a keepalive that requests a reply). It is the replication connection's only
// writer; the stream goroutine only reads.
func (s *Source) reportStatus(ctx context.Context) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
		if err := s.advance(); err != nil {
			s.log.Warn("postgres source: recording progress", "err", err)
		}
		if err := s.sendStatus(); err != nil && ctx.Err() == nil {
			s.log.Warn("postgres source: reporting the position to the server", "slot", s.slot, "err", err)
		}
	}
}

func (s *Source) sendStatus() error {
	pos := pglogrepl.LSN(s.pos.Load())
	if pos == 0 {
		return nil
	}
	return pglogrepl.SendStandbyStatusUpdate(context.Background(), s.repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos})
}

// relation is the followed table as the stream describes it: where its columns are.
type relation struct {
	id, title int   // column indexes; title -1 when there is none
	text      []int // column indexes of the text columns
}

// stream reads the slot's messages until ctx ends or the stream fails.
func (s *Source) stream(ctx context.Context) error {
	var (
		rel     *relation
		relID   uint32
		inTxn   bool
		commit  pglogrepl.LSN
		ord     int
		lastEnd pglogrepl.LSN
	)
	for {
		msg, err := s.repl.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("source: the replication stream of slot %s failed: %w", s.slot, err)
		}
		var data []byte
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			data = m.Data
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("source: the replication stream of slot %s failed: %w", s.slot, pgconn.ErrorResponseToPgError(m))
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("source: slot %s: %w", s.slot, err)
			}
			// Between transactions, every transaction committed before the server's position
			// has been sent (a transaction is decoded whole at its commit): once what came
			// before is acked, the position is durable, and an idle table does not hold the
			// server's log.
			if !inTxn && k.ServerWALEnd > lastEnd {
				s.tr.mark(k.ServerWALEnd, false)
				lastEnd = k.ServerWALEnd
			}
			if k.ReplyRequested {
				select {
				case s.kick <- struct{}{}:
				default:
				}
			}
			continue
		case pglogrepl.XLogDataByteID:
		default:
			continue
		}
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("source: slot %s: %w", s.slot, err)
		}
		m, err := parse(x.WALData)
		if err != nil {
			return fmt.Errorf("source: slot %s: decoding a pgoutput message at %s: %w", s.slot, x.WALStart, err)
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			if m.Namespace != s.tab.ns || m.RelationName != s.tab.name {
				continue
			}
			if rel, err = s.relationOf(m); err != nil {
				return err
			}
			relID = m.RelationID
		case *pglogrepl.BeginMessage:
			inTxn, commit, ord = true, m.FinalLSN, 0
		case *pglogrepl.CommitMessage:
			inTxn = false
			s.tr.mark(m.TransactionEndLSN, false)
			lastEnd = max(lastEnd, m.TransactionEndLSN)
		case *pglogrepl.InsertMessage:
			if m.RelationID != relID || rel == nil {
				continue
			}
			ord++
			if err := s.change(ctx, rel, nil, m.Tuple, commit, ord); err != nil {
				return err
			}
		case *pglogrepl.UpdateMessage:
			if m.RelationID != relID || rel == nil {
				continue
			}
			ord++
			if err := s.change(ctx, rel, m.OldTuple, m.NewTuple, commit, ord); err != nil {
				return err
			}
		case *pglogrepl.DeleteMessage:
			if m.RelationID != relID || rel == nil {
				continue
			}
			ord++
			id, err := rel.idOf(m.OldTuple)
			if err != nil {
				return s.identityError(err)
			}
			if err := s.hand(ctx, item{doc: s.deletion(id, commit, ord)}); err != nil {
				return err
			}
		case *pglogrepl.TruncateMessage:
			// A publication made elsewhere may publish truncates; they name no rows.
			s.skip("truncate")
			s.log.Warn("postgres source: a TRUNCATE of the table names no rows, so its documents stay in the outputs; delete rows with DELETE, or run again with --from-scratch", "table", s.tab.quoted)
		}
	}
}

func (s *Source) deletion(id string, commit pglogrepl.LSN, ord int) schemas.Document {
	return schemas.Document{ID: s.o.Source + ":" + id, Source: s.o.Source, Version: Version(commit, ord),
		Position: fmt.Sprintf("slot %s@%s", s.slot, commit), Deleted: true}
}

func (s *Source) identityError(err error) error {
	return fmt.Errorf("source.id_column: %w; the table's replica identity must be %q (its primary key, or REPLICA IDENTITY USING INDEX on a unique index of it)", err, s.o.IDColumn)
}

// change hands out the document of an inserted or updated row; an update that changed the
// id is also the deletion of the old id.
func (s *Source) change(ctx context.Context, rel *relation, old, tup *pglogrepl.TupleData, commit pglogrepl.LSN, ord int) error {
	r, toasted, err := rel.rowOf(tup)
	if err != nil {
		return s.identityError(err)
	}
	pos := fmt.Sprintf("slot %s@%s", s.slot, commit)
	if r.id == nil {
		return s.hand(ctx, item{err: &connectors.BadInputError{Position: pos, Reason: fmt.Errorf("column %q is NULL", s.o.IDColumn)},
			doc: schemas.Document{Position: pos}})
	}
	if old != nil {
		if oldID, err := rel.idOf(old); err == nil && oldID != *r.id {
			if err := s.hand(ctx, item{doc: s.deletion(oldID, commit, ord)}); err != nil {
				return err
			}
		}
	}
	if toasted {
		// The log leaves out a large value that the update did not change: read the row as it
		// is now. Labelled with this change's version it may be newer than the change; the
		// row's later changes follow with their own versions, so the outputs end on its text.
		cur, found, err := s.lookup(ctx, *r.id)
		if err != nil {
			return err
		}
		if !found {
			return nil // deleted since: its delete follows in the stream
		}
		r = cur
	}
	return s.emit(ctx, r, Version(commit, ord), pos, false)
}

// lookup reads the followed columns of the row with id.
func (s *Source) lookup(ctx context.Context, id string) (row, bool, error) {
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s = CAST($1::text AS %s)", s.columns(), s.tab.quoted,
		pgx.Identifier{s.o.IDColumn}.Sanitize(), s.tab.types[s.o.IDColumn])
	r, err := s.scan(s.conn.QueryRow(ctx, q, id).Scan)
	if err == pgx.ErrNoRows {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, fmt.Errorf("source: reading row %s of %s: %w", id, s.tab.quoted, err)
	}
	return r, true, nil
}

// scan reads one row of columns()'s select list.
func (s *Source) scan(scan func(dest ...any) error) (row, error) {
	vals := make([]*string, 2+len(s.o.TextColumns))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := scan(dest...); err != nil {
		return row{}, err
	}
	return row{id: vals[0], title: vals[1], text: vals[2:]}, nil
}

// relationOf finds the followed columns in a relation message.
func (s *Source) relationOf(m *pglogrepl.RelationMessage) (*relation, error) {
	at := map[string]int{}
	for i, c := range m.Columns {
		at[c.Name] = i
	}
	find := func(key, col string) (int, error) {
		i, ok := at[col]
		if !ok {
			return 0, fmt.Errorf("source.%s: table %s no longer has column %q", key, s.tab.quoted, col)
		}
		return i, nil
	}
	rel := &relation{title: -1}
	var err error
	if rel.id, err = find("id_column", s.o.IDColumn); err != nil {
		return nil, err
	}
	if s.o.TitleColumn != "" {
		if rel.title, err = find("title_column", s.o.TitleColumn); err != nil {
			return nil, err
		}
	}
	for _, c := range s.o.TextColumns {
		i, err := find("text_columns", c)
		if err != nil {
			return nil, err
		}
		rel.text = append(rel.text, i)
	}
	return rel, nil
}
