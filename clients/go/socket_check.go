package journald

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/grpc/codes"
)

// DaemonUIDEnv names the uid (or user name) the daemon is expected to run as.
const DaemonUIDEnv = "JOURNALD_DAEMON_UID"

// ExpectedDaemonUID is the uid a socket must belong to: explicit if not nil, else
// $JOURNALD_DAEMON_UID (a uid or a user name), else this process's uid.
func ExpectedDaemonUID(explicit *int) (int, error) {
	if explicit != nil {
		return *explicit, nil
	}
	v := strings.TrimSpace(os.Getenv(DaemonUIDEnv))
	if v == "" {
		return os.Geteuid(), nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		return n, nil
	}
	u, err := user.Lookup(v)
	if err != nil {
		return 0, &Error{Code: CodePermissionDenied, Status: codes.PermissionDenied,
			Message:  fmt.Sprintf("the expected daemon user %q (%s) does not exist on this host; set it to the uid or user name the daemon runs as", v, DaemonUIDEnv),
			Metadata: map[string]string{"expected_uid": v}}
	}
	n, _ := strconv.Atoi(u.Uid)
	return n, nil
}

func untrusted(socket, path, what string, found, expected int) error {
	return &Error{
		Code:   CodePermissionDenied,
		Status: codes.PermissionDenied,
		Message: fmt.Sprintf("refusing to dial %s: %s, so it may belong to someone waiting for your calls "+
			"(found uid %d, expected the daemon's uid %d or root). If you started the daemon yourself, "+
			"stop whatever holds %s (as root: remove it) and start the daemon again; if the daemon runs "+
			"as another user, set %s to that user (or use WithDaemonUID)",
			socket, what, found, expected, path, DaemonUIDEnv),
		Metadata: map[string]string{
			"socket": socket, "path": path,
			"found_uid": strconv.Itoa(found), "expected_uid": strconv.Itoa(expected),
		},
	}
}

// CheckSocket refuses (ErrPermissionDenied) a socket the expected daemon uid (or root) did
// not put in a directory only it may write: the socket and its directory must each belong
// to that uid or root, neither may be a symbolic link, and the directory may not be
// writable by its group or others unless it is sticky (/tmp). A socket missing or out of reach passes (dialing it
// fails the same way). Nothing is
// sent anywhere.
func CheckSocket(socket string, daemonUID *int) error { return checkSocket(socket, daemonUID) }

func checkSocket(socket string, daemonUID *int) error {
	expected, err := ExpectedDaemonUID(daemonUID)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return err
	}
	for _, c := range []struct {
		path  string
		isDir bool
	}{{filepath.Dir(abs), true}, {abs, false}} {
		fi, err := os.Lstat(c.path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil // dialing it fails the same way, before a byte is sent
		}
		if err != nil {
			return untrusted(socket, c.path, fmt.Sprintf("%s cannot be examined (%v)", c.path, err), -1, expected)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return untrusted(socket, c.path, "its owner cannot be read on this system", -1, expected)
		}
		owner := int(st.Uid)
		if fi.Mode()&fs.ModeSymlink != 0 {
			return untrusted(socket, c.path, c.path+" is a symbolic link", owner, expected)
		}
		if owner != expected && owner != 0 {
			what := "the socket " + c.path
			if c.isDir {
				what = "its directory " + c.path
			}
			return untrusted(socket, c.path, what+" belongs to another user", owner, expected)
		}
		// a sticky directory (/tmp) lets no one replace a socket that is not theirs: the
		// socket's own owner, checked next, then says who put it there
		if c.isDir && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return untrusted(socket, c.path, fmt.Sprintf("its directory %s is writable by others (mode %04o), who could replace the socket",
				c.path, fi.Mode().Perm()), owner, expected)
		}
	}
	return nil
}
