package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/keyorder/keyorder/ordering/orderingtest"
)

// maxSpecBytes bounds a POST /faults body.
const maxSpecBytes = 4096

// controlHandler serves the control endpoint:
//
//	POST   /faults          body: a fault spec; applies it, answers its status
//	GET    /faults          the status of every fault spec, oldest first
//	DELETE /faults/{id}     stops a spec and removes the faults it made
//	GET    /subscriptions   the names of the subscriptions that exist
//	GET    /stats?sub=S     the counters of one subscription (name or ID)
//
// Answers are JSON; errors are plain text with status 400 or 404.
func controlHandler(srv *orderingtest.Server, fs *faults) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSpecBytes))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		spec, err := parseFault(strings.TrimSpace(string(body)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		reply(w, http.StatusCreated, fs.add(spec))
	})
	mux.HandleFunc("GET /faults", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusOK, fs.list())
	})
	mux.HandleFunc("DELETE /faults/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil || !fs.remove(id) {
			http.Error(w, fmt.Sprintf("no fault %q", r.PathValue("id")), http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /subscriptions", func(w http.ResponseWriter, _ *http.Request) {
		subs := srv.Subscriptions()
		if subs == nil {
			subs = []string{} // [], not null
		}
		reply(w, http.StatusOK, subs)
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		sub, err := oneSubscription(srv, r.URL.Query().Get("sub"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		reply(w, http.StatusOK, srv.Stats(sub))
	})
	return mux
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}

// oneSubscription resolves a name or ID that must name exactly one
// subscription.
func oneSubscription(srv *orderingtest.Server, sub string) (string, error) {
	if sub == "" {
		return "", errors.New("sub is missing")
	}
	names := resolve(srv, sub)
	if len(names) != 1 {
		return "", fmt.Errorf("%q names %d subscriptions, not 1: %q", sub, len(names), names)
	}
	return names[0], nil
}
