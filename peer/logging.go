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

// parseMemberlistLine splits a memberlist log line into its level and its
// text, without the level and the "memberlist: " prefixes. Lines without a
// known level prefix are logged at Info.
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
	return level, string(line)
}
