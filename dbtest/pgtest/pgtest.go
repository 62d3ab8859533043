// Package pgtest starts a PostgreSQL server of the tests' own, in a
// temporary directory, with the initdb and pg_ctl of the machine's
// PostgreSQL (Debian's postgresql package, or any on PATH), and hands each
// test a fresh database on it. Where no server binary is installed, the
// tests that ask for one skip, saying so.
//
// PostgreSQL refuses to run as root, so as root the server runs as the
// postgres user (or nobody), in a directory given to that user. The
// directory (0700) and the server's socket (0700), which trusts whoever
// connects, are that user's alone: root reaches them, no other user does.
package pgtest

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	"go.uber.org/goleak"

	"github.com/keyorder/keyorder/internal/leaktest"
)

// Driver is the database/sql driver name the DSNs are for.
const Driver = "pgx"

// BinEnv names a directory of PostgreSQL's programs, to use instead of
// the ones found on PATH or under /usr/lib/postgresql.
const BinEnv = "KEYORDER_PG_BIN"

// DurableEnv, set to 1, has the shared server write as a production
// server does: fsync, synchronous commits and full-page writes on, so
// that each commit waits for its WAL to reach the disk. By default they
// are off, for speed.
const DurableEnv = "KEYORDER_PG_DURABLE"

// ErrNoServer says that the machine has no PostgreSQL server programs.
var ErrNoServer = errors.New("pgtest: no PostgreSQL server binary (initdb, pg_ctl) installed; install Debian's postgresql package or set " + BinEnv)

// Server is a running PostgreSQL server in a directory of its own.
type Server struct {
	bin, dir string
	cred     *syscall.Credential
	dbs      atomic.Int64
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// DSN starts the package's shared server on first use, creates a fresh
// database on it, and returns its DSN for the "pgx" driver. It skips tb if
// the machine has no server, and fails it if the server does not start.
func DSN(tb testing.TB) string {
	tb.Helper()
	shared.once.Do(func() { shared.srv, shared.err = Start() })
	need(tb, shared.err)
	return database(tb, shared.srv)
}

// Own starts a server of tb's own, which it may take Down and Up without
// disturbing other tests, stopped when tb ends, and returns it and a
// fresh database's DSN on it. It skips tb if the machine has no server,
// and fails it if the server does not start.
func Own(tb testing.TB) (*Server, string) {
	tb.Helper()
	s, err := Start()
	need(tb, err)
	tb.Cleanup(func() { _ = s.Stop() })
	return s, database(tb, s)
}

// need skips tb if err says the machine has no server, and fails it on
// any other error.
func need(tb testing.TB, err error) {
	tb.Helper()
	switch {
	case errors.Is(err, ErrNoServer):
		tb.Skip(err.Error())
	case err != nil:
		tb.Fatal(err)
	}
}

// database creates a database on s, failing tb if it cannot, and returns
// its DSN.
func database(tb testing.TB, s *Server) string {
	tb.Helper()
	dsn, err := s.NewDatabase()
	if err != nil {
		tb.Fatal(err)
	}
	return dsn
}

// Open is DSN, opened, and closed when tb ends.
func Open(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := sql.Open(Driver, DSN(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// Main runs a package's tests, checks that they leave no goroutine
// behind (internal/leaktest), and stops the shared server: call it as the
// package's TestMain.
func Main(m *testing.M) {
	leaktest.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		StopShared()
		os.Exit(code)
	}))
}

// StopShared stops the server DSN started, if it did: call it once the
// package's tests have run (from TestMain).
func StopShared() {
	if shared.srv != nil {
		_ = shared.srv.Stop()
	}
}

// Start initialises a cluster in a new temporary directory and starts a
// server on it that listens on a Unix socket in that directory only.
func Start() (*Server, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "kopg")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, dir: dir}
	if err := s.start(); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	if err := s.dropRoot(); err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	if err := s.run("initdb", "-D", data, "-U", "keyorder", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"); err != nil {
		return err
	}
	return s.Up()
}

// Down shuts the server down as an operator's restart does, with a fast
// shutdown: every client's connection ends, a transaction under way is
// rolled back, and what was committed stays. Up starts it again.
func (s *Server) Down() error {
	return s.run("pg_ctl", "stop", "-m", "fast", "-w", "-D", filepath.Join(s.dir, "data"))
}

// Up starts the server on its directory: after Start, a server Down shut.
func (s *Server) Up() error {
	data := filepath.Join(s.dir, "data")
	// The socket, with trust authentication, is its user's alone (and
	// root's): 0700, in a directory of 0700.
	opts := fmt.Sprintf("-k %s -c unix_socket_permissions=0700 -c listen_addresses='' -c max_connections=200", s.dir)
	if os.Getenv(DurableEnv) != "1" {
		opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	}
	if err := s.run("pg_ctl", "start", "-w", "-D", data, "-l", filepath.Join(s.dir, "log"), "-o", opts); err != nil {
		return fmt.Errorf("%w\n%s", err, s.log())
	}
	return nil
}

// NewDatabase creates a database of its own on s and returns its DSN.
func (s *Server) NewDatabase() (string, error) {
	name := "t" + strconv.FormatInt(s.dbs.Add(1), 10)
	admin, err := sql.Open(Driver, s.dsn("postgres"))
	if err != nil {
		return "", err
	}
	defer admin.Close()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		return "", fmt.Errorf("pgtest: create database: %w", err)
	}
	return s.dsn(name), nil
}

func (s *Server) dsn(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=keyorder dbname=%s sslmode=disable", s.dir, db)
}

// Dir returns the server's directory, which holds its socket.
func (s *Server) Dir() string { return s.dir }

// Shared returns the server DSN started, nil before.
func Shared() *Server { return shared.srv }

// Stop stops the server at once and removes its directory.
func (s *Server) Stop() error {
	var err error
	if _, statErr := os.Stat(filepath.Join(s.dir, "data", "postmaster.pid")); statErr == nil {
		err = s.run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", filepath.Join(s.dir, "data"))
	}
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// dropRoot, as root, gives the directory to an unprivileged user and has
// the server's programs run as that user.
func (s *Server) dropRoot() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return fmt.Errorf("pgtest: running as root and no postgres or nobody user: %w", err)
		}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := os.Chmod(s.dir, 0o700); err != nil {
		return err
	}
	return os.Chown(s.dir, int(uid), int(gid))
}

func (s *Server) run(prog string, args ...string) error {
	cmd := exec.Command(filepath.Join(s.bin, prog), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", prog, err, out.String())
	}
	return nil
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "log"))
	return string(b)
}

// findBin finds the directory of initdb and pg_ctl: BinEnv, PATH, then
// the newest of Debian's /usr/lib/postgresql/*/bin.
func findBin() (string, error) {
	if dir := os.Getenv(BinEnv); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) < version(dirs[j]) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	return "", ErrNoServer
}

func version(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}
