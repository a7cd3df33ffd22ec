package journald

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

const nobodyUID = 65534

// impostor listens on path and counts every byte any client sends it.
type impostor struct {
	ln          net.Listener
	bytes, conn atomic.Int64
}

func listenImpostor(t *testing.T, path string) *impostor {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	imp := &impostor{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			imp.conn.Add(1)
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					imp.bytes.Add(int64(n))
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return imp
}

// shortTemp is a fresh directory with a short path (a unix socket path has at most 107 bytes).
func shortTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "jdgo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func defaultPathIn(t *testing.T, base string) string {
	t.Setenv("TMPDIR", base)
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("JOURNALD_SOCKET", "")
	t.Setenv(DaemonUIDEnv, "")
	return DefaultSocketPath()
}

func TestConnectRefusesAnImpostorsPrecreatedSocketDirAndSendsItNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the impostor's directory must belong to another uid (chown)")
	}
	base := shortTemp(t)
	path := defaultPathIn(t, base)
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	imp := listenImpostor(t, path)
	for _, p := range []string{dir, path} { // as if uid 65534 had made them
		if err := os.Lchown(p, nobodyUID, nobodyUID); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := Connect(ctx)
	if c != nil {
		c.Close()
	}
	t.Logf("impostor captured %d bytes over %d connections", imp.bytes.Load(), imp.conn.Load())
	if !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("Connect to another uid's socket: %v, want permission_denied", err)
	}
	var jerr *Error
	if !errors.As(err, &jerr) || jerr.Metadata["found_uid"] != "65534" || jerr.Metadata["path"] != dir {
		t.Fatalf("the refusal does not name the path and the owner found: %#v", jerr)
	}
	if n, k := imp.bytes.Load(), imp.conn.Load(); n != 0 || k != 0 {
		t.Fatalf("the impostor received %d bytes over %d connections", n, k)
	}
}

func TestConnectRefusesAWorldWritableOrSymlinkedSocketDir(t *testing.T) {
	base := shortTemp(t)
	path := defaultPathIn(t, base)
	dir := filepath.Dir(path)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	imp := listenImpostor(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := Connect(ctx); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("0777 socket dir: %v, want permission_denied", err)
	}
	real := filepath.Join(base, "elsewhere")
	if err := os.Rename(dir, real); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(ctx); !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("symlinked socket dir: %v, want permission_denied", err)
	}
	if n := imp.bytes.Load(); n != 0 {
		t.Fatalf("the impostor received %d bytes", n)
	}
}

func TestCheckSocketAcceptsAPrivateDirOfOurOwnAndAConfiguredDaemonUID(t *testing.T) {
	base := shortTemp(t)
	path := defaultPathIn(t, base)
	if err := os.Mkdir(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	listenImpostor(t, path)
	if err := CheckSocket(path, nil); err != nil {
		t.Fatalf("our own private socket refused: %v", err)
	}
	other := os.Geteuid() + 1
	err := CheckSocket(path, &other)
	if os.Geteuid() == 0 {
		if err != nil { // root may always serve
			t.Fatalf("a root-owned socket refused: %v", err)
		}
		return
	}
	if !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("expected daemon uid %d, socket of uid %d: %v", other, os.Geteuid(), err)
	}
}
