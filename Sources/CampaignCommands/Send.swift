import ArgumentParser
import Foundation
import CampaignIO
import CampaignJSON
import CampaignPlan
import CampaignSend
import CampaignTLS
import LocalTime
import SendLedger
import SendJournal
import SendEngine

/// `campaign send`: a plan to the gateway over parallel TLS connections.
struct Send: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send a plan to the gateway: parallel TLS connections, batching, exact error recovery, a resumable journal.",
        discussion: """
        Reads the plan from PLAN or standard input (spooled into the journal, so \
        --resume needs no input). Every notification ends accepted or refused with \
        a status; an interrupted send resumes with `campaign send --resume DIR`. \
        Exit codes: 0 complete, 64 usage, 65 incomplete plan, 66 unusable plan or \
        journal, 69 gateway unreachable (resumable), 75 interrupted (resumable), \
        77 credential or trust failure.
        """
    )

    @Argument(help: "The plan; - (the default) reads standard input. With --resume: where the journal's plan file is now, when it moved (it must be the same plan).")
    var plan: String = "-"

    @Option(help: ArgumentHelp("Journal directory for a new send.", valueName: "dir"))
    var journal: String?

    @Option(help: ArgumentHelp("Resume the send whose journal is in this directory.", valueName: "dir"))
    var resume: String?

    @Option(help: ArgumentHelp("Gateway address.", valueName: "host:port"))
    var gateway: String?

    @Option(help: ArgumentHelp("sandbox or production: gateway.sandbox.push.apple.com:2195 / gateway.push.apple.com:2195, or for an h2 plan api.sandbox.push.apple.com:443 / api.push.apple.com:443.", valueName: "name"))
    var environment: String?

    @OptionGroup var credentials: CredentialOptions

    @OptionGroup var proxyOptions: ProxyOptions

    @OptionGroup var token: TokenOptions

    @Option(help: ArgumentHelp("h2 plans: the most streams in flight per connection (default 1000; never above the server's limit).", valueName: "n"))
    var streams: Int?

    @Option(help: ArgumentHelp("h2 plans: PING a connection with requests open and nothing heard for S seconds (default 30); no answer within S/3 (at most 10 s) drops it, and three dropped in a row end the send (exit 69, resumable).", valueName: "s"))
    var pingAfter: Double?

    @Option(help: ArgumentHelp("h2 plans: a request unanswered for S seconds (or work waiting that long on a server that allows no stream) drops its connection, and what was open on it goes again as possible duplicates; also the TLS handshake's limit, at most 10 s (default 30).", valueName: "s"))
    var answerTimeout: Double?

    @Option(help: ArgumentHelp("When the gateway has failed for S seconds with nothing accepted (h2: 5xx, 429, resets, refused streams, connections that achieve nothing; binary: status 1, 255, undefined codes), stop with exit 69 and leave the rest for --resume (default 120).", valueName: "s"))
    var outageLimit: Double?

    @Option(help: ArgumentHelp("How many connections: auto (the default) or N (1-128, exactly). With auto, h2 plans start with 4 connections and add more while the server's window or stream limit holds them back and each step raises the rate, up to --max-connections; binary plans use 4.", valueName: "auto|N"))
    var connections: ConnectionCount?

    @Option(help: ArgumentHelp("With --connections auto: the most connections the pool grows to (default 64; 1-128).", valueName: "N"))
    var maxConnections: Int?

    @Option(help: ArgumentHelp("Write when this many bytes are batched (default 262144, 16 TLS records).", valueName: "bytes"))
    var batchBytes: Int?

    @Option(name: .customLong("batch-delay-ms"), help: ArgumentHelp("Write a batch at the latest this long after its first notification (default 5).", valueName: "ms"))
    var batchDelayMilliseconds: Int?

    @Option(parsing: .unconditional, help: ArgumentHelp("At most this many notifications per second over all connections (default 0: no limit).", valueName: "n"))
    var rate: Int?

    @Option(parsing: .unconditional, help: ArgumentHelp("At most this many notifications per second over every part of the campaign (instead of the job's throttle): each part takes its share, re-divided as parts start and end.", valueName: "n"))
    var rateTotal: Int?

    @Option(help: ArgumentHelp("Write the final counts here as JSON (- for standard output).", valueName: "file"))
    var report: String?

    @Option(help: ArgumentHelp("Keep Prometheus metrics of the send in this file (text format, rewritten atomically every second; node_exporter's textfile collector reads it).", valueName: "file"))
    var metrics: String?

    @Option(help: ArgumentHelp("Record unregistered devices in this suppression store, with when they stopped being valid: HTTP/2 410 answers, binary status 8; for a broadcast plan, channels APNs answers ChannelNotRegistered (a dead-channel store).", valueName: "file"))
    var feedbackStore: String?

    @Option(help: ArgumentHelp("The app's send ledger (a directory, shared by every part and machine): each accepted notification is recorded in this send's own segment, for plan --ledger's campaign rules; a plan's frequencyCap is checked again, and each notification claimed, as it is written.", valueName: "dir"))
    var ledger: String?

    @Option(help: ArgumentHelp("Prove acceptance after every N notifications per connection (costs a reconnect each; default 0: by time and at the end).", valueName: "n"))
    var checkpointEvery: Int?

    @Option(help: ArgumentHelp("Prove acceptance at least every S seconds while notifications are unproven, so progress and the journal advance during a long send (default 2; 0: by count and at the end only).", valueName: "s"))
    var checkpointSeconds: Double?

    @Option(help: ArgumentHelp("A scheduled plan: the longest wait for the next moment with the connections open (default 60); a later moment closes them, and they open again 10 s before it.", valueName: "s"))
    var holdOpen: Double?

    @Flag(help: ArgumentHelp("A scheduled plan (deliverAt, quietHours): send what is due now and exit 0 with outcome scheduled, naming the next moment; cron runs `campaign send --resume DIR --due-only` every few minutes. Without it, send waits for each moment (connections closed while the next is over a minute away)."))
    var dueOnly = false

    @Flag(help: ArgumentHelp("With --resume, after `plan | send` was killed while planning: read the plan again from standard input, check it against what was spooled, and go on."))
    var replan = false

    func validate() throws {
        guard (journal == nil) != (resume == nil) else {
            throw ValidationError("Give exactly one of --journal DIR (a new send) or --resume DIR.")
        }
        if let n = streams, !(1...10_000).contains(n) { throw ValidationError("--streams must be between 1 and 10000.") }
        if let s = pingAfter, !(0.3...3600).contains(s) { throw ValidationError("--ping-after must be between 0.3 and 3600 seconds.") }
        if let s = answerTimeout, !(0.5...3600).contains(s) { throw ValidationError("--answer-timeout must be between 0.5 and 3600 seconds.") }
        if let s = outageLimit, !(1...86_400).contains(s) { throw ValidationError("--outage-limit must be between 1 and 86400 seconds.") }
        if journal != nil {
            guard credentials.cert != nil || token.authKey != nil else { throw ValidationError("--cert (or, for an h2 plan, --auth-key) is required.") }
            guard (gateway == nil) != (environment == nil) else {
                throw ValidationError("Give exactly one of --gateway HOST:PORT or --environment sandbox|production.")
            }
        }
        if let g = gateway, GatewayAddress.parse(g) == nil { throw ValidationError("--gateway must be HOST:PORT, not \"\(g)\".") }
        if let e = environment, GatewayAddress.environment(e, feedback: false) == nil {
            throw ValidationError("--environment must be sandbox or production.")
        }
        if case .fixed(let n)? = connections, !(1...128).contains(n) { throw ValidationError("--connections must be auto or between 1 and 128.") }
        if let n = maxConnections, !(1...128).contains(n) { throw ValidationError("--max-connections must be between 1 and 128.") }
        if case .fixed? = connections, maxConnections != nil { throw ValidationError("--max-connections goes with --connections auto, not a fixed count.") }
        if let n = batchBytes, !(256...(1 << 20)).contains(n) { throw ValidationError("--batch-bytes must be between 256 and 1048576.") }
        if let n = batchDelayMilliseconds, !(0...10_000).contains(n) { throw ValidationError("--batch-delay-ms must be between 0 and 10000.") }
        if let n = rate, n < 0 { throw ValidationError("--rate must not be negative.") }
        if let n = rateTotal, n < 1 { throw ValidationError("--rate-total must be at least 1 (notifications per second over every part).") }
        if let n = checkpointEvery, n < 0 { throw ValidationError("--checkpoint-every must not be negative.") }
        if let s = checkpointSeconds, !(0...3600).contains(s) { throw ValidationError("--checkpoint-seconds must be between 0 and 3600.") }
        if let s = holdOpen, !(0...3600).contains(s) { throw ValidationError("--hold-open must be between 0 and 3600 seconds.") }
        if replan && resume == nil { throw ValidationError("--replan goes with --resume DIR.") }
        if replan && plan != "-" { throw ValidationError("--replan reads the plan from standard input; do not name a plan file.") }
    }

    func run() throws {
        try reportingErrors(as: "send") {
            let sent: (SendReport, String?)?
            do { sent = try send() } catch let cancelled as CancelledJournal {
                printError("campaign send: \(cancelled)")   // exit 0: cron's next run must not alarm anyone
                // A cron job that reads its report gets one: the send as far as it went, cancelled.
                if let path = report {
                    try Self.write(SendSession.cancelledReport(directory: resume ?? journal!), to: path == "-" ? "-" : absolutePath(path))
                }
                return
            }
            guard let (report, reportPath) = sent else { return }   // already complete: nothing done
            printError(report.text)
            if let path = reportPath {
                try Self.write(report, to: path)
            }
            switch report.outcome {
            case .complete, .scheduled, .cancelled: return
            case .incompletePlan: throw CampaignExit.incompletePlan
            case .interrupted: throw CampaignExit.interrupted
            case .gaveUp: throw CampaignExit.unavailable
            case .credentials: throw CampaignExit.credentials
            case .malformed: throw CampaignExit.incompletePlan
            // Only a journal of another version holds one; a run never ends so.
            case .unrecognized: throw CampaignExit.failure
            }
        }
    }

    /// The run's report, and where it goes (`--report`, or on a resume the send's first `--report`).
    private func send() throws -> (SendReport, String?)? {
        // A cancelled journal (or a part cancelled before it started): one sentence, nothing sent.
        try CancelledJournal.refuse(directory: resume ?? journal!)
        let start: SendSession.Start
        var settings: SendSettings
        if let dir = resume {
            let adjust: (inout SendSettings) -> Void = { settings in
                // Flags may override what the journal remembers: credentials, and tuning.
                if let c = credentials.cert { settings.certificate = absolutePath(c) }
                if let k = credentials.key { settings.key = absolutePath(k) }
                if let a = credentials.ca { settings.caFile = absolutePath(a) }
                if let g = gateway.flatMap(GatewayAddress.parse) { (settings.gatewayHost, settings.gatewayPort) = g }
                apply(to: &settings)
            }
            settings = try Journal.read(directory: dir).settings
            adjust(&settings)
            // A plan named with --resume is where the plan is now (the journal
            // and the plan moved to another machine); the journal checks it is the same.
            start = .resume(journal: dir, replan: replan, plan: plan == "-" ? nil : plan, adjust: adjust)
        } else {
            let (host, port) = gateway.flatMap(GatewayAddress.parse) ?? GatewayAddress.environment(environment!, feedback: false)!
            // Every file by absolute path: the journal keeps them, and
            // `--resume` may run from any directory.
            settings = SendSettings(gatewayHost: host, gatewayPort: port, certificate: credentials.cert.map(absolutePath) ?? "")
            settings.key = credentials.key.map(absolutePath)
            settings.caFile = credentials.ca.map(absolutePath)
            if connections == nil { (settings.connections, settings.maxConnections) = (ConnectionCount.autoStart, ConnectionCount.autoMaximum) }
            apply(to: &settings)
            start = .new(plan: plan, journal: journal!, settings: settings)
        }
        // The first signal stops the running send, or ends a wait for the next moment at once.
        // Watched before the session creates the journal: a signal that comes
        // once the journal exists (or while the plan is still being read) is
        // never lost to the moment before the watch began, nor kills the send.
        let waitStop = try CancellationPipe()
        let running = RunningSender()
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM], handler: SignalEscalation(notice: {
            "campaign send: \(running.stoppingWords) (signal again to exit at once)"
        }, first: {
            waitStop.cancel()
            running.sender?.requestStop()
        }).handle)
        defer { signals.cancel() }
        // `campaign cancel` journals its record, then signals (the watch also looks once a second): stop for good.
        let directory = resume ?? journal!
        let cancelWatch = try CancelWatch(directory: directory) {
            printError("campaign send: cancelled: \(running.stoppingWords)")
            waitStop.cancel()
            running.sender?.requestStop()
        }
        let cancelSignal = SignalWatcher(signals: [CampaignCancel.signal]) { cancelWatch.check() }
        defer { cancelSignal.cancel(); cancelWatch.stop() }
        // Credentials and the gateway's name are checked once the plan's
        // format is known and before a journal is created: a wrong path,
        // passphrase or host must not leave behind a journal that refuses the
        // corrected command.
        var madeContext: TLSContext?
        let passphrase = try credentials.passphrase()
        let session = try SendSession(start) { header, settings in
            if resume == nil, gateway == nil, let name = environment {
                (settings.gatewayHost, settings.gatewayPort) = header.wire.gateway(environment: name)!
            }
            if let missing = header.wire.missingCredential(certificate: !settings.certificate.isEmpty, providerTokenKey: settings.authKey != nil) {
                throw ValidationError(missing)
            }
            if let refusal = header.http2.flatMap({ PushTypeCredentials.refusal(pushType: $0.pushType, tokenAuthentication: settings.authKey != nil) }) {
                throw ValidationError(refusal)
            }
            // Before a journal exists: a ledger that cannot be written must not leave a half-made one behind.
            if let ledger = settings.ledger { try LedgerSegmentWriter.checkDirectory(ledger) }
            if let key = settings.authKey {
                // The key is read now, so a wrong path fails before anything is sent.
                let loaded = try PrivateKey.load(pemFile: key, passphrase: nil)
                guard ProviderToken.isProviderTokenKey(loaded) else { throw TLSError(.notAProviderTokenKey(path: key)) }
            }
            madeContext = try CredentialOptions.context(cert: settings.certificate, key: settings.key, ca: settings.caFile,
                                                        passphrase: passphrase, http2: header.wire.negotiatesHTTP2InTLS)
            (settings.proxy, settings.proxyUserVariable) = try proxyOptions.resolve(
                gateway: settings.gatewayHost, journaled: resume == nil ? nil : settings.proxy, journaledVariable: settings.proxyUserVariable)
            // Through a proxy the proxy resolves the gateway's name: only the proxy's must resolve here.
            if let proxy = settings.proxy {
                try Socket.resolve(host: proxy.host, port: proxy.port)
            } else if resume == nil {
                try Socket.resolve(host: settings.gatewayHost, port: settings.gatewayPort)
            }
        }
        guard let context = madeContext else { throw ValidationError("internal: no TLS context") }
        for note in session.notes { printError("campaign send: \(note)") }
        if let complete = session.alreadyCompleteReport {
            // Nothing is printed but the note (cron asks all day). A report
            // asked for now is written; the send's own (its first --report's)
            // is left as its last run wrote it, with that run's figures.
            if report != nil, let path = session.settings.reportPath { try Self.write(complete, to: path) }
            return nil
        }
        if let ended = try session.readInputToEnd(cancellation: waitStop) { return (ended, session.settings.reportPath) }
        var run = session
        while true {
            let sender = try run.makeSender(context: context, cancellation: CancellationPipe(),
                                            logger: { printError("campaign send: \($0)") })
            sender.dueOnly = dueOnly
            sender.holdOpenSeconds = run.settings.holdOpenSeconds
            running.sender = sender
            sender.stoppedAs = { JournalCancel.exists(directory: directory) ? .cancelled : .interrupted }
            if waitStop.isCancelled || JournalCancel.exists(directory: directory) { sender.requestStop() }
            let progress = isatty(2) == 1 ? ProgressLine(sender: sender) : nil
            let metricsFile = run.settings.metricsPath.map { MetricsFile(sender: sender, path: $0, journal: run.journal.directory) }
            var report = try run.run(sender)
            if report.outcome == .cancelled { report.message = CampaignCancel.endedMessage(directory: directory) }
            // A scheduled run that ended as the cancel came: the send ends cancelled, not waiting.
            if report.outcome == .scheduled, let cancelled = try CampaignCancel.endWaitIfCancelled(journal: run.journal) {
                (report.outcome, report.message) = (.cancelled, cancelled)
            }
            progress?.stop()
            let waits = report.outcome == .scheduled && !dueOnly && report.nextMoment != nil && !waitStop.isCancelled
            metricsFile?.stop(waiting: waits)
            running.sender = nil
            guard waits, let next = report.nextMoment else { return (report, run.settings.reportPath) }
            printError(report.text)
            if let path = run.settings.reportPath { try Self.write(report, to: path) }
            let wake = ScheduledRunWait.wake(after: report, next: next, holdOpenSeconds: sender.holdOpenSeconds, now: wallClockSeconds())
            printError("campaign send: waiting until \(utcText(next)) for the next notifications (connections closed; a signal ends the wait, and --resume goes on)")
            if try !ScheduledRunWait.wait(until: wake, journal: run.journal, stop: waitStop) {
                if let cancelled = try CampaignCancel.endWaitIfCancelled(journal: run.journal) {
                    (report.outcome, report.message) = (.cancelled, cancelled)
                    metricsFile?.write(running: false)
                    return (report, run.settings.reportPath)
                }
                report.outcome = .interrupted
                report.message = try ScheduledRunWait.stopped(journal: run.journal, waitingFor: next)
                metricsFile?.write(running: false)
                return (report, run.settings.reportPath)
            }
            run = try run.nextRun()
        }
    }

    /// A report as `--report` writes it: its JSON on one line.
    private static func write(_ report: SendReport, to path: String) throws {
        try writeOutput(report.json.serialized() + [0x0A], to: path)
    }

    private func apply(to settings: inout SendSettings) {
        // A resume rewrites the send's report and metrics where they were, unless told otherwise.
        if let path = report { settings.reportPath = path == "-" ? "-" : absolutePath(path) }
        if let path = metrics { settings.metricsPath = path == "-" ? "-" : absolutePath(path) }
        switch connections {
        case .fixed(let n)?:
            (settings.connections, settings.maxConnections) = (n, nil)
        case .auto?:
            (settings.connections, settings.maxConnections) = (ConnectionCount.autoStart, maxConnections ?? ConnectionCount.autoMaximum)
        case nil:
            if let m = maxConnections { settings.maxConnections = m }
        }
        if let v = batchBytes { settings.batchBytes = v }
        if let v = batchDelayMilliseconds { settings.batchDelayMilliseconds = v }
        if let v = rate { settings.rate = v }
        if let v = rateTotal { settings.rateTotal = v }
        if let v = checkpointEvery { settings.checkpointEvery = v }
        if let v = checkpointSeconds { settings.checkpointMilliseconds = Int((v * 1000).rounded()) }
        if let v = feedbackStore { settings.feedbackStore = absolutePath(v) }
        if let v = ledger { settings.ledger = absolutePath(v) }
        if let v = answerTimeout { settings.answerTimeoutSeconds = v }
        if let v = outageLimit { settings.outageLimitSeconds = v }
        if let v = streams { settings.streams = v }
        if let v = pingAfter { settings.pingAfterSeconds = v }
        if let v = holdOpen { settings.holdOpenSeconds = v }
        if let v = token.authKey {
            settings.authKey = absolutePath(v)
            settings.keyID = token.keyId
            settings.teamID = token.teamId
        }
        if let v = token.tokenCache { settings.tokenCache = absolutePath(v) }
    }
}

/// `path` made absolute against the current directory, as the journal keeps it.
func absolutePath(_ path: String) -> String { URL(fileURLWithPath: path).standardizedFileURL.path }

/// `--connections`: `auto` (a pool sized to the distance) or a fixed count.
enum ConnectionCount: ExpressibleByArgument, Equatable {
    case auto
    case fixed(Int)

    /// How many connections an automatic pool starts with (and a binary send uses).
    static let autoStart = 4
    /// The most an automatic pool grows to: from 150 ms away, 64 connections
    /// of one 65,535-byte window per round trip carry 3 KB payloads at about
    /// 9,000/s; more would add load on Apple's side for little gain, and a
    /// user who wants more says so.
    static let autoMaximum = 64

    init?(argument: String) {
        if argument == "auto" { self = .auto } else if let n = Int(argument) { self = .fixed(n) } else { return nil }
    }
}
