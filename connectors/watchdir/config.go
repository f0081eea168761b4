package watchdir

import (
	"fmt"
	"path/filepath"
	"time"
)

// Config is the keys of a source that reads a path of files and can watch it instead (jsonl,
// uspto). Zero values mean the watcher's defaults (Open's), so that a key written where it
// does not apply (pattern without watch) can be told from one left out.
type Config struct {
	Watch   bool          `yaml:"watch" default:"false" doc:"path is a directory watched for new files; each file's progress is checkpointed in run.state_dir"`
	Pattern string        `yaml:"pattern" default:"*" doc:"watched files' name glob"`
	Poll    time.Duration `yaml:"poll" default:"10s" doc:"how often a watched directory is listed"`
	// Settle is how long a watched file must go unchanged before it is read, so a file copied
	// in place is not read half written. Files renamed in need none.
	Settle time.Duration `yaml:"settle" default:"2s" doc:"a watched file is read only after it has not changed for this long"`
}

// Validate reports the first bad value through bad.
func (c Config) Validate(bad func(key, format string, args ...any) error) error {
	switch {
	case c.Pattern != "" && !c.Watch:
		return bad("pattern", "applies only with watch: true (else put the glob in path)")
	case c.Pattern != "" && patternError(c.Pattern) != nil:
		return bad("pattern", "%v", patternError(c.Pattern))
	case c.Poll < 0:
		return bad("poll", "must be >= 0")
	case c.Settle < 0:
		return bad("settle", "must be >= 0")
	case c.Settle != 0 && !c.Watch:
		return bad("settle", "applies only with watch: true")
	}
	return nil
}

// patternError says why pattern is not a file-name glob (nil when it is one).
func patternError(pattern string) error {
	if _, err := filepath.Match(pattern, "x"); err != nil {
		return fmt.Errorf("%q is not a file-name glob: %w", pattern, err)
	}
	return nil
}
