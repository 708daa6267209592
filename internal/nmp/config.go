package nmp

// Config gathers every NMP knob of the broker. It is comparable, so callers
// can test for the zero value and substitute DefaultConfig.
type Config struct {
	// Limits bound agent-supplied headers.
	Limits Limits
	// Rules are the conflict thresholds.
	Rules Rules
	// Halt is the budget stop rule.
	Halt HaltRule
	// Modes configures SelectMode.
	Modes ModeConfig
	// MaxTrace bounds a header's trace after Apply adds the agent's
	// entries; 0 means DefaultMaxTrace. Entries beyond it are dropped (and
	// reported) but their tokens still count.
	MaxTrace int
	// IgnoreAgentSignals makes Apply take no signals from agents. Signals
	// are advisory and cannot raise trust or budget, so by default they are
	// taken as given (within range).
	IgnoreAgentSignals bool
}

// DefaultMaxTrace bounds a header's trace: the broker's own hops (about ten
// on a federated route) plus an agent's 32 entries leave ample room.
const DefaultMaxTrace = 64

// DefaultConfig returns the defaults of every knob.
func DefaultConfig() Config {
	return Config{
		Limits:   DefaultLimits(),
		Rules:    DefaultRules(),
		Halt:     DefaultHaltRule(),
		Modes:    DefaultModeConfig(),
		MaxTrace: DefaultMaxTrace,
	}
}

// Validate reports the first unusable knob.
func (c Config) Validate() error {
	if err := c.Halt.Validate(); err != nil {
		return err
	}
	if err := c.Modes.Validate(); err != nil {
		return err
	}
	if c.MaxTrace < 0 {
		return newError(CodeInvalidConfig, "max_trace", "must not be negative")
	}
	return nil
}

func (c Config) maxTrace() int {
	if c.MaxTrace <= 0 {
		return DefaultMaxTrace
	}
	return c.MaxTrace
}
