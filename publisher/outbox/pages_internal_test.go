package outbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPagesStayWithinTheirBound runs page statements of maxPages+1 texts
// through queryPage on SQLite, with a driver that counts the statements
// prepared and closed: the first maxPages stay prepared and serve again,
// the one past the bound closes them all before it is prepared, and
// closePages leaves none open.
func TestPagesStayWithinTheirBound(t *testing.T) {
	t.Parallel()
	st := &stmtCounts{}
	db := sql.OpenDB(countingConnector{st})
	t.Cleanup(func() { _ = db.Close() })
	ru := &run{r: &Relay{o: &Outbox{db: db, d: SQLite}}}
	ctx := context.Background()
	query := func(i int) {
		rs, err := ru.queryPage(ctx, fmt.Sprintf("SELECT %d", i), nil)
		require.NoError(t, err)
		assert.False(t, rs.Next())
		require.NoError(t, rs.Close())
	}

	for round := range 2 {
		for i := range maxPages {
			query(i)
		}
		assert.Equal(t, [2]int{maxPages, 0}, st.get(), "round %d: each text prepared once, none closed", round)
	}
	assert.Len(t, ru.pages, maxPages)

	query(maxPages)
	assert.Equal(t, [2]int{maxPages + 1, maxPages}, st.get(), "past the bound, all closed, then the new text prepared")
	assert.Len(t, ru.pages, 1)
	query(0)
	assert.Equal(t, [2]int{maxPages + 2, maxPages}, st.get(), "a text closed is prepared again")

	ru.closePages()
	assert.Equal(t, [2]int{maxPages + 2, maxPages + 2}, st.get(), "closePages closes every statement")
	assert.Empty(t, ru.pages)
}

// stmtCounts counts the statements a countingConnector's connections
// prepared and closed.
type stmtCounts struct {
	mu               sync.Mutex
	prepared, closed int
}

func (s *stmtCounts) get() [2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return [2]int{s.prepared, s.closed}
}

func (s *stmtCounts) add(prepared, closed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prepared += prepared
	s.closed += closed
}

// countingConnector makes connections whose statements select no row.
type countingConnector struct{ st *stmtCounts }

func (c countingConnector) Connect(context.Context) (driver.Conn, error) { return countingConn(c), nil }
func (c countingConnector) Driver() driver.Driver                        { return nil }

type countingConn struct{ st *stmtCounts }

func (c countingConn) Prepare(string) (driver.Stmt, error) {
	c.st.add(1, 0)
	return countingStmt(c), nil
}
func (c countingConn) Close() error              { return nil }
func (c countingConn) Begin() (driver.Tx, error) { return nil, driver.ErrSkip }

type countingStmt struct{ st *stmtCounts }

func (s countingStmt) Close() error {
	s.st.add(0, 1)
	return nil
}
func (s countingStmt) NumInput() int                              { return -1 }
func (s countingStmt) Exec([]driver.Value) (driver.Result, error) { return nil, driver.ErrSkip }
func (s countingStmt) Query([]driver.Value) (driver.Rows, error)  { return noRows{}, nil }

type noRows struct{}

func (noRows) Columns() []string         { return []string{"n"} }
func (noRows) Close() error              { return nil }
func (noRows) Next([]driver.Value) error { return io.EOF }
