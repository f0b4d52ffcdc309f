package peer

import (
	"bytes"
	"context"
	"log/slog"
)

// logWriter turns memberlist's log lines ("[WARN] memberlist: text") into
// slog records at the matching level, so that memberlist never writes to
// stderr on its own. It is safe for concurrent use.
type logWriter struct {
	l *slog.Logger
}

// memberlist's level prefixes and their slog levels.
var memberlistLevels = []struct {
	prefix string
	level  slog.Level
}{
	{"[DEBUG]", slog.LevelDebug},
	{"[INFO]", slog.LevelInfo},
	{"[WARN]", slog.LevelWarn},
	{"[ERR]", slog.LevelError},
	{"[ERROR]", slog.LevelError},
}

// Write logs one line (or several, one record each) and never fails.
func (w *logWriter) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(bytes.TrimRight(p, "\n"), []byte("\n")) {
		level, msg := parseMemberlistLine(line)
		if msg == "" {
			continue
		}
		w.l.Log(context.Background(), level, msg, slog.String("component", "memberlist"))
	}
	return len(p), nil
}

// transientErrors begin the texts of memberlist (v0.7.0)'s errors about one
// exchange with one peer (a probe, a gossip send, a push/pull): the failure
// detector retries them and reports what it concludes (a member suspected or
// failed) on its own, so they are logged as warnings, not errors that call
// for an operator.
var transientErrors = []string{
	"Failed fallback TCP ping",
	"Failed to send gossip",
	"Failed to send indirect ping",
	"Failed to send indirect UDP ping",
	"Failed to send UDP ping",
	"Failed to send UDP compound ping",
	"Failed to send ack",
	"Failed to send nack",
	"Push/Pull with",
}

// parseMemberlistLine splits a memberlist log line into its level and its
// text, without the level and the "memberlist: " prefixes. Lines without a
// known level prefix are logged at Info; transient errors (transientErrors)
// at Warn.
func parseMemberlistLine(line []byte) (slog.Level, string) {
	line = bytes.TrimSpace(line)
	level := slog.LevelInfo
	for _, l := range memberlistLevels {
		if rest, ok := bytes.CutPrefix(line, []byte(l.prefix)); ok {
			level, line = l.level, bytes.TrimSpace(rest)
			break
		}
	}
	line, _ = bytes.CutPrefix(line, []byte("memberlist: "))
	if level == slog.LevelError {
		for _, p := range transientErrors {
			if bytes.HasPrefix(line, []byte(p)) {
				level = slog.LevelWarn
				break
			}
		}
	}
	return level, string(line)
}
