package journald

import (
	"os"
	"path/filepath"
	"strconv"
)

// DefaultSocketPath follows the daemon's rules: $JOURNALD_SOCKET if set; else
// $XDG_RUNTIME_DIR/journald/journald.sock if XDG_RUNTIME_DIR is set; else
// <tmpdir>/journald-<uid>/journald.sock, where tmpdir is $TMPDIR or /tmp.
func DefaultSocketPath() string {
	if p := os.Getenv("JOURNALD_SOCKET"); p != "" {
		return p
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "journald", "journald.sock")
	}
	tmp := os.Getenv("TMPDIR")
	if tmp == "" {
		tmp = "/tmp"
	}
	return filepath.Join(tmp, "journald-"+strconv.Itoa(os.Getuid()), "journald.sock")
}

// Target is the gRPC target for a socket path: unix:///abs/path.
func Target(socketPath string) (string, error) {
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return "", err
	}
	return "unix://" + abs, nil
}
