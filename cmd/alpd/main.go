// Command alpd is the ALP broker. With no argument it runs all six services
// in one process on an embedded NATS; `alpd <service>` runs one service
// against an external NATS with its own gRPC listener.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/alpd-project/alpd/internal/config"
	"github.com/alpd-project/alpd/internal/daemon"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	cfg, rest, err := config.Load(args, os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "alpd:", err)
		return 2
	}
	service := ""
	switch {
	case len(rest) > 1:
		fmt.Fprintf(os.Stderr, "alpd: one service at most, got %s\n", strings.Join(rest, " "))
		return 2
	case len(rest) == 1:
		service = rest[0]
		if !slices.Contains(config.Services(), service) {
			fmt.Fprintf(os.Stderr, "alpd: unknown service %q (one of %s)\n", service, strings.Join(config.Services(), ", "))
			return 2
		}
	}
	log := newLogger(cfg.Log)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	d, err := daemon.Complete(ctx, cfg, service, os.Getenv, log)
	if err != nil {
		log.Error("alpd could not start", "err", err)
		return 1
	}
	if err := d.Run(ctx); err != nil {
		log.Error("alpd stopped with an error", "err", err)
		return 1
	}
	log.Info("alpd stopped")
	return 0
}

func newLogger(c config.Log) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, opts))
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: alpd [flags] [%s]\n\n", strings.Join(config.Services(), "|"))
	config.Usage(os.Stderr)
}
