package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/keyorder/keyorder/dbtest/pgtest"
	"github.com/keyorder/keyorder/internal/harness"
	"github.com/keyorder/keyorder/publisher"
	"github.com/keyorder/keyorder/publisher/outbox"
)

// roleEnv makes the test binary run as a relay process, which the tests
// kill with SIGKILL; relayEnv carries its settings.
const (
	roleEnv  = "KEYORDER_OUTBOX_ROLE"
	relayEnv = "KEYORDER_OUTBOX_RELAY" // driver, DSN, dialect, server address, topic ID, project
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "relay" {
		os.Exit(relayMain())
	}
	pgtest.Main(m)
}

// relayMain runs a relay until it is killed or interrupted, and reports
// "running" on stdout once it has its leases.
func relayMain() int {
	var driver, dsn, addr, topic, project string
	var dialect int
	if _, err := fmt.Sscanf(os.Getenv(relayEnv), "%q %q %d %q %q %q", &driver, &dsn, &dialect, &addr, &topic, &project); err != nil {
		fmt.Fprintln(os.Stderr, "relay settings:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := runChild(ctx, driver, dsn, outbox.Dialect(dialect), addr, topic, project)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func runChild(ctx context.Context, driver, dsn string, d outbox.Dialect, addr, topic, project string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := outbox.New(ctx, db, d)
	if err != nil {
		return err
	}
	client, err := harness.ConnectProject(ctx, addr, project)
	if err != nil {
		return err
	}
	defer client.Close()
	pub, err := publisher.New(client, topic, publisher.WithoutStamps(), publisher.WithLogger(quiet))
	if err != nil {
		return err
	}
	defer pub.Close(context.Background())
	r, err := outbox.NewRelay(ob, pub, outbox.WithLease(time.Second), outbox.WithBatchSize(20), outbox.WithLogger(quiet))
	if err != nil {
		return err
	}
	fmt.Println("running " + strconv.Itoa(os.Getpid()))
	return r.Run(ctx)
}
