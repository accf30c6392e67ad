import CampaignJSON

/// Everything a journal says, replayed.
public struct JournalState: Sendable {
    /// The settings the send was started with (its first start record).
    public var settings: SendSettings
    /// The settings its latest run was given (a resume's own `--rate-total`, say).
    public var latestRunSettings: SendSettings? = nil
    /// The plan header, as JSON, for matching a resume against the same plan.
    public var planHeader: JSONValue
    /// Set once the whole plan was read and its trailer verified.
    public var planChecksum: String?
    public var planRecords: Int?
    public var planIncomplete = false
    /// Final ordinals per shard (accepted, presumed, failed or skipped).
    public var done: [Int: OrdinalRanges] = [:]
    public var presumed = 0
    public var accepted = 0
    public var failures: [SendFailure] = []
    /// A plan with variants: the last counts journaled (every run's; none in older journals).
    public var variants: [VariantCounts] = []
    /// Scheduled notifications skipped as too late (final, not failed).
    public var skipped: [SkippedNotification] = []
    /// Per run (in order), the moments a scheduled send released after waiting (UNIX seconds, when).
    public var waves: [[(moment: Int, at: Int)]] = []
    /// Per shard, ordinals below this were written to a connection at least once.
    public var sentBelow: [Int: Int] = [:]
    /// Over every run, a killed one's from its last tick (see ``closeUnendedRun()``).
    public var resends = 0
    public var duplicatesRisked = 0
    public var reconnects = 0
    /// Resends by why over every run ("429 TooManyRequests": n), as ``resends``.
    public var resentByKind: [String: Int] = [:]
    public var runs = 0
    /// How the last run ended; nil while running or after a crash.
    public var outcome: SendOutcome?
    /// `campaign cancel`'s record (the directory's `cancel` file), when it was cancelled.
    public var cancel: JournalCancel?
    /// The last record was torn (a crash mid-write) and was ignored.
    public var tornTail = false
    /// Where the torn record starts, to cut it off before appending.
    public var tornOffset: Int? = nil

    public var doneCount: Int { done.values.reduce(0) { $0 + $1.count } }
    /// Every suppression the journal holds (token, when it stopped being valid), over all runs.
    public var suppressions: [([UInt8], UInt32)] { failures.compactMap { f in f.unregisteredAt.map { (f.token, $0) } } }
    /// Per run (in order), its timeline: counts once a second.
    public var timeline: [[JournalRecord.Tick]] = []
    /// Per run (in order), how it ended; nil for a run with no end record (killed, crashed, or still running).
    public var runOutcomes: [SendOutcome?] = []
    /// Per run (in order), when it began sending (UNIX seconds); nil in journals from before.
    public var runStartedAt: [Int?] = []
    /// Per run (in order), how long it ran, from its end record; nil for a
    /// run without one (killed) or in journals from before.
    public var runSeconds: [Double?] = []
    /// Every run's time together: each ended run's own, a killed run's last
    /// journaled second (one killed within its first second adds none).
    public var sendingSeconds: Double {
        timeline.indices.reduce(0.0) { sum, i in
            sum + ((i < runSeconds.count ? runSeconds[i] : nil) ?? Double(timeline[i].last?.second ?? 0))
        }
    }
    /// A scheduled send whose last run ended to wait for the next: when it
    /// meant to start the next run (UNIX seconds). Nil once a run starts, and
    /// after a `--due-only` run (cron starts the next).
    public var waitingUntil: Int?
    /// Per run (in order), whether a scheduled send began it itself after waiting (not a resume).
    public var runWoke: [Bool] = []
    /// A woke record was read and its run has not started yet.
    package var woke = false

    /// The last tick of the run being replayed, until its end `counters`
    /// record or its `end`: a run killed before writing them has only its ticks.
    package var unclosedTick: JournalRecord.Tick?

    /// A run that ended without its `counters` (killed, crashed, or still
    /// running): its resends and connections as its last tick counted them.
    package mutating func closeUnendedRun() {
        guard let tick = unclosedTick else { return }
        unclosedTick = nil
        resends += tick.resent
        reconnects += tick.connections
        resentByKind.merge(tick.resentByKind, uniquingKeysWith: +)
    }
}
