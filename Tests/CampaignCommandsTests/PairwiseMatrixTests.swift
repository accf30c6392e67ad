import Foundation
import APNSWire
import Testing
import CampaignIO
import CampaignJSON
import CampaignSend
import CampaignTestSupport
import GatewaySimulator
import LocalTime
import PlanStream
import SendJournal

/// One factor of the send's modes: its values, each a level of the matrix.
protocol MatrixFactor: CaseIterable, Sendable {
    /// The factor's values, in a fixed order.
    static var levels: [String] { get }
    var level: String { get }
}

extension MatrixFactor where Self: RawRepresentable, RawValue == String {
    static var levels: [String] { allCases.map(\.rawValue) }
    var level: String { rawValue }
}

/// Where the plan comes from.
enum MatrixInput: String, MatrixFactor { case pipe, planFile, part }
/// When each notification may go: at once, at a moment a few seconds ahead,
/// or once quiet hours ending a few seconds ahead are over (in the record's zone).
enum MatrixSchedule: String, MatrixFactor { case none, deliverAt, quietHours }
/// Who the notification is for, and how the provider proves itself: a device over HTTP/2 with a provider
/// token or with a certificate, over the binary interface in either of its framed formats, or a broadcast
/// channel (HTTP/2, a certificate).
enum MatrixTarget: String, MatrixFactor { case h2Token, h2Certificate, enhanced, frame, broadcast }
enum MatrixRoute: String, MatrixFactor { case direct, proxy }
/// What happens to the first run: nothing, `kill -9`, or SIGTERM; an interrupted run is followed by `send --resume`.
enum MatrixInterruption: String, MatrixFactor { case none, kill9, sigterm }
/// The campaign's rules: none; a frequencyCap of 1 whose scope another campaign has already used on some of
/// the devices (sent after this one was planned); or variants with a holdout.
enum MatrixRules: String, MatrixFactor { case none, cap, variants }
/// Whether `campaign cancel` ends the campaign once 40% is recorded (mid-send, or between an interrupted run and its resume).
enum MatrixCancel: String, MatrixFactor { case none, cancel }

/// One run of the matrix: a value of each factor. A new factor is a new
/// stored property here (an enum conforming to ``MatrixFactor``) and a new
/// column in ``PairwiseMatrixTests/coveringArray``: the pair check finds
/// the factors by reflection.
struct MatrixRow: Sendable, CustomTestStringConvertible {
    var input: MatrixInput
    var schedule: MatrixSchedule
    var target: MatrixTarget
    var route: MatrixRoute
    var interruption: MatrixInterruption
    var rules: MatrixRules
    var cancel: MatrixCancel

    init(_ input: MatrixInput, _ schedule: MatrixSchedule, _ target: MatrixTarget, _ route: MatrixRoute, _ interruption: MatrixInterruption,
         _ rules: MatrixRules, _ cancel: MatrixCancel) {
        (self.input, self.schedule, self.target, self.route) = (input, schedule, target, route)
        (self.interruption, self.rules, self.cancel) = (interruption, rules, cancel)
    }

    var isHTTP2: Bool { target == .h2Token || target == .h2Certificate || target == .broadcast }

    /// Each factor's name, values, and this row's value.
    var factors: [(name: String, levels: [String], value: String)] {
        Mirror(reflecting: self).children.compactMap { child in
            guard let name = child.label, let value = child.value as? any MatrixFactor else { return nil }
            return (name, type(of: value).levels, value.level)
        }
    }

    var testDescription: String { factors.map(\.value).joined(separator: " · ") }
}

/// Features tested where they meet (issue 33, STYLE.md item 18): the send's
/// modes in a covering array, every pair of values of any two factors in at
/// least one row, each row the real `campaign` against the simulator on
/// 127.0.0.1, asserting the same invariants from the simulator's record:
/// every notification delivered (up to a cancel), duplicates no more than the
/// journal reports, none before its moment nor inside its quiet hours, no
/// device reached by both campaigns of a cap of 1, no holdout device reached,
/// nothing after a cancel, per-variant counts that add up, and the exit codes.
///
/// The rows run concurrently, each on a thread of its own (`.ownThreads`):
/// a row waits for events (notifications recorded, a process's end) that a
/// loaded machine's cooperative threads, busy with other suites, must not
/// delay by seconds.
@Suite(.ownThreads) struct PairwiseMatrixTests {
    /// The covering array: 15 rows for 3·3·5·2·3·3·2 values, the fewest
    /// that can hold every pair of the five targets and the three values of
    /// another factor (a greedy covering; every row is needed).
    static let coveringArray: [MatrixRow] = [
        //     input       schedule      target          route     interruption  rules       cancel
        .init(.part,      .none,        .frame,         .direct,  .none,        .none,      .none),
        .init(.pipe,      .deliverAt,   .h2Token,       .proxy,   .sigterm,     .none,      .cancel),
        .init(.planFile,  .quietHours,  .h2Certificate, .proxy,   .kill9,       .cap,       .none),
        .init(.pipe,      .quietHours,  .enhanced,      .direct,  .none,        .variants,  .cancel),
        .init(.part,      .deliverAt,   .h2Certificate, .direct,  .sigterm,     .variants,  .none),
        .init(.planFile,  .none,        .h2Token,       .direct,  .kill9,       .variants,  .cancel),
        .init(.part,      .none,        .enhanced,      .proxy,   .sigterm,     .cap,       .cancel),
        .init(.planFile,  .deliverAt,   .broadcast,     .proxy,   .none,        .none,      .none),
        .init(.pipe,      .deliverAt,   .frame,         .direct,  .kill9,       .cap,       .none),
        .init(.planFile,  .quietHours,  .frame,         .proxy,   .sigterm,     .variants,  .cancel),
        .init(.part,      .quietHours,  .broadcast,     .direct,  .kill9,       .none,      .cancel),
        .init(.part,      .quietHours,  .h2Token,       .direct,  .none,        .cap,       .none),
        .init(.pipe,      .none,        .h2Certificate, .direct,  .none,        .none,      .cancel),
        .init(.planFile,  .deliverAt,   .enhanced,      .direct,  .kill9,       .none,      .none),
        .init(.pipe,      .none,        .broadcast,     .direct,  .sigterm,     .none,      .none),
    ]

    /// Pairs no campaign can hold: a job refuses a frequencyCap or variants
    /// beside `broadcast` (a channel's devices are unknown to the sender).
    static let impossiblePairs: Set<String> = ["target=broadcast & rules=cap", "target=broadcast & rules=variants"]

    /// The pairs of values (of two factors) no row of `rows` holds, as "factor=value & factor=value".
    static func uncoveredPairs(_ rows: [MatrixRow]) -> [String] {
        let table = rows.map(\.factors)
        guard let factors = table.first else { return ["no rows"] }
        var missing: [String] = []
        for i in factors.indices {
            for j in factors.indices where j > i {
                let seen = Set(table.map { "\($0[i].value)|\($0[j].value)" })
                for a in factors[i].levels {
                    for b in factors[j].levels where !seen.contains("\(a)|\(b)") {
                        let pair = "\(factors[i].name)=\(a) & \(factors[j].name)=\(b)"
                        if !impossiblePairs.contains(pair) { missing.append(pair) }
                    }
                }
            }
        }
        return missing
    }

    @Test func theCoveringArrayHoldsEveryPairOfValues() {
        let rows = Self.coveringArray
        #expect(Self.uncoveredPairs(rows) == [], "pairs no row holds")
        #expect(rows[0].factors.count == Mirror(reflecting: rows[0]).children.count, "every stored property of a row is a factor")
        #expect(rows[0].factors.allSatisfy { $0.levels.count >= 2 })
        #expect((15...18).contains(rows.count))
        #expect(!rows.contains { $0.target == .broadcast && $0.rules != .none }, "no row holds a pair no job can")
        // The check can fail: without any one row, pairs are left uncovered.
        for k in rows.indices {
            var fewer = rows
            fewer.remove(at: k)
            #expect(!Self.uncoveredPairs(fewer).isEmpty, "row \(k) covers no pair alone")
        }
    }

    /// Notifications per row, and of them those in the zone a minute ahead
    /// (whose moment or quiet hours are already past: they go at once).
    static let records = 300, aheadRecords = 100
    /// Notifications a second over all connections: slow enough that an
    /// interruption lands mid-send (a second's worth goes at once when the
    /// moment comes: the bucket's burst), fast enough that a row lasts seconds.
    static let rate = 20
    /// Rows that are interrupted go at half that: the interruption comes once
    /// 40% are recorded, and the rest (90 of a part's 150, 180 of 300) lasts
    /// 9 s or more, however late the test's look comes on a loaded machine.
    static let interruptedRate = 10
    /// How far ahead the moment, or the quiet hours' end, is.
    static let lead = 3.0
    /// Every wait's bound, in seconds: well above a row's few seconds, so
    /// that a hang fails its row instead of the run (a backstop, not a speed).
    static let bound = 120.0
    /// Attempts of an interrupted row: one whose interruption found its first
    /// run already complete (the test looked later than the rest of the send
    /// lasts; no fault of the product's) runs again from scratch.
    static let attempts = 3

    @Test(.timeLimit(.minutes(6)), arguments: coveringArray)
    func eachRowDeliversEveryNotificationOnceOnTime(_ row: MatrixRow) async throws {
        for attempt in 1...Self.attempts {
            if try await Self.runRow(row, attempt: attempt) { return }
        }
        Issue.record("in \(Self.attempts) attempts, every interruption found the first run already complete")
    }

    /// One attempt at a row; false when its interruption found the first run
    /// complete (then nothing was judged: the row is to run again).
    static func runRow(_ row: MatrixRow, attempt: Int) async throws -> Bool {
        let run = try Run(row)
        defer { run.stop() }
        let planned = try run.plannedTokens()
        #expect(planned.count + run.holdout.count >= (row.input == .part ? Self.records / 4 : Self.records), "the plan holds the audience")
        if row.rules == .variants {
            #expect(!run.holdout.isEmpty && run.holdout.isDisjoint(with: planned), "a holdout, kept out of the plan")
        }
        // A cap of 1: another campaign of its scope reaches some devices after this one was planned.
        let otherReached = try run.sendAnotherCampaignOfTheScope()
        if row.rules == .cap { #expect(!planned.intersection(otherReached).isEmpty, "the other campaign reached devices of this plan") }
        let deliverable = planned.subtracting(otherReached)

        let started = Date()
        let baseline = run.recorded
        let first = try run.start()
        var arrivedBeforeInterruption = 0
        /// UNIX milliseconds once a cancel had ended the send: nothing may arrive after it.
        var cancelledAt: Int64?
        let due = baseline + deliverable.count * 2 / 5
        /// Mid-send: once 40% are recorded by the gateway (and a piped plan is
        /// all spooled, so a plain --resume can go on); false when the first run
        /// ended before (then nothing is judged: the row runs again).
        func waitForMidSend() -> Bool {
            let event = waitForEvent(of: first.send, backstop: Self.bound) {
                run.recorded >= due && (row.input != .pipe || PipelineCrashTests.spoolIsComplete(run.dir))
            }
            if case .ended(let status) = event {
                // Over before its interruption: not the product's fault if it delivered everything.
                let state = try? Journal.read(directory: run.dir.file("journal"))
                #expect(status == 0 && state?.outcome == .complete, "the first run ended (\(status)) before \(due) were recorded: \(first.send.stderr)")
                print("matrix \(row.testDescription): attempt \(attempt): the first run ended before its interruption; again")
                return false
            }
            #expect(event == .came, "\(due) not recorded in \(Int(Self.bound)) s: \(first.send.stderr)")
            return true
        }
        switch row.interruption {
        case .none:
            if row.cancel == .cancel {
                guard waitForMidSend() else { return false }
                try run.cancel()
                let status = await first.send.exitStatus(within: Self.bound)
                cancelledAt = Run.nowMilliseconds()
                #expect(status == 0, "a cancelled send exits 0: \(first.send.stderr)")
            } else {
                let status = await first.send.exitStatus(within: Self.bound)
                #expect(status == 0, "\(first.send.stderr)")
            }
        case .kill9, .sigterm:
            guard waitForMidSend() else { return false }
            arrivedBeforeInterruption = (try? run.arrivals().count) ?? 0
            let signalled = Date()
            if row.interruption == .kill9 {
                kill(first.send.process.processIdentifier, SIGKILL)
                let status = await first.send.exitStatus(within: Self.bound)
                #expect(status != nil, "killed")
                if first.send.process.terminationReason == .exit, status == 0,
                   (try? Journal.read(directory: run.dir.file("journal")))?.outcome == .complete {
                    print("matrix \(row.testDescription): attempt \(attempt): the kill found the first run complete; again")
                    return false
                }
                #expect(first.send.process.terminationReason == .uncaughtSignal)
            } else {
                kill(first.send.process.processIdentifier, SIGTERM)
                let status = await first.send.exitStatus(within: Self.bound)
                #expect(Date().timeIntervalSince(signalled) < 10, "SIGTERM ends a send within its stop bound (10 s)")
                if status == 0, (try? Journal.read(directory: run.dir.file("journal")))?.outcome == .complete {
                    print("matrix \(row.testDescription): attempt \(attempt): SIGTERM came as the first run completed (exit 0); again")
                    return false
                }
                #expect(status == 75, "\(first.send.stderr)")
            }
            let state = try Journal.read(directory: run.dir.file("journal"))
            #expect(state.outcome != .complete && state.doneCount < planned.count, "interrupted mid-send: \(state.doneCount) done of \(planned.count)")
            if row.cancel == .cancel {
                // Between the interrupted run and its resume: the resume sends nothing.
                try run.cancel()
                cancelledAt = Run.nowMilliseconds()
            }
            let tunnels = run.proxy?.connectsLogged ?? 0
            let resumed = try CampaignProcess(["send", "--resume", "journal"], in: run.dir.path, environment: ProxyTests.cleanEnvironment)
            let status = await resumed.exitStatus(within: Self.bound)
            #expect(status == 0, "\(resumed.stderr)")
            if row.cancel == .cancel {
                #expect(resumed.stderr.contains("nothing is sent"), "a cancelled campaign's resume sends nothing: \(resumed.stderr)")
            } else if let proxy = run.proxy {
                #expect(proxy.connectsLogged > tunnels, "the resume went through the proxy again")
            }
        }
        if let planner = first.planner {
            let status = await planner.exitStatus(within: Self.bound)
            #expect(status != nil, "the planner ended")
            if row.interruption == .none && row.cancel == .none { #expect(status == 0, "\(planner.stderr)") }
        }
        if let proxy = run.proxy { #expect(proxy.connectsLogged >= 1, "the connections went through the proxy") }
        run.simulator.stop()
        let (duplicates, reported) = try run.expectEachOnceOnTime(deliverable, planned: planned, otherReached: otherReached, cancelledAt: cancelledAt)
        print("matrix \(row.testDescription): \(planned.count) planned, \(planned.count - deliverable.count) capped, "
              + "\(row.interruption == .none ? "not interrupted" : "interrupted after \(arrivedBeforeInterruption) arrived"), "
              + "\(cancelledAt == nil ? "" : "cancelled, ")\(duplicates) duplicates (\(reported) reported), \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
        return true
    }

    /// One row's directory, simulator, proxy and schedule.
    final class Run: @unchecked Sendable {
        let row: MatrixRow
        let dir = TemporaryDirectory("matrix")
        let simulator: GatewaySimulator
        let proxy: TinyProxy?
        /// The moment (deliverAt), or the end of the quiet hours, in UTC's zone (UNIX seconds).
        let moment: Int64
        /// Each token's zone offset in minutes (0 or 1).
        private(set) var offsets: [String: Int] = [:]
        /// The devices the plan held out (variants with a holdout).
        private(set) var holdout: Set<String> = []
        /// Quiet hours on every device's clock, as UNIX seconds of UTC's day.
        static let quietLength: Int64 = 30
        /// The other campaign of a cap's scope reaches the devices of these audience lines.
        static let otherCampaignLines = 150..<210

        /// A broadcast row's channels, made in the simulator's store.
        private(set) var channels: [ChannelID] = []
        static let bundle = "com.example.campaign"

        init(_ row: MatrixRow) throws {
            self.row = row
            simulator = row.isHTTP2 ? try startHTTP2Simulator(in: dir, tokens: row.target == .h2Token) : try SendProcessTests.simulator(in: dir)
            if row.target == .broadcast {
                for _ in 0..<PairwiseMatrixTests.records {
                    guard case .created(let id) = simulator.channelStore.create(environment: "sandbox", bundleID: Self.bundle, policy: .mostRecent) else {
                        throw IOError(path: "", reason: "the simulator made no channel")
                    }
                    channels.append(id)
                }
            }
            proxy = row.route == .proxy ? try TinyProxy(in: dir) : nil
            // The other campaign of a cap's scope is sent between this one's plan and its send: a longer lead.
            moment = ScheduledSendTests.soon(PairwiseMatrixTests.lead + (row.rules == .cap ? 5 : 0))
            try writeJobAndAudience()
        }

        func stop() {
            simulator.stop()
            proxy?.stop()
        }

        static func nowMilliseconds() -> Int64 { Int64((wallClockSeconds() * 1000).rounded(.up)) }

        /// Notifications and broadcasts the gateway accepted so far.
        var recorded: Int {
            let statistics = simulator.currentStatistics()
            return statistics.accepted + statistics.broadcasts
        }

        private var format: String { row.isHTTP2 ? #""format":"h2","topic":"com.example.campaign""# : #""format":"\#(row.target.rawValue)""# }
        private static let capRule = #","frequencyCap":{"max":1,"per":"24h","scope":"matrix"}"#

        private func writeJobAndAudience() throws {
            let day = moment - ((moment % 86_400) + 86_400) % 86_400
            var schedule = ""
            switch row.schedule {
            case .none: break
            case .deliverAt:
                let time = TimeOfDay(seconds: Int(moment - day)).description
                let date = CivilDate(daysSinceEpoch: Int(day / 86_400)).description
                schedule = #","deliverAt":{"localTime":"\#(time)","date":"\#(date)","window":"1h","defaultTimeZone":"UTC"}"#
            case .quietHours:
                schedule = "," + ScheduledSendTests.quietHours(from: moment - Self.quietLength, to: moment)
            }
            if row.target == .broadcast {
                var lines = ["channel_id,n"]
                for (n, id) in channels.enumerated() { lines.append("\(id.base64),\(n)") }
                try lines.joined(separator: "\n").write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
                let job = #"{"campaign":"matrix","format":"h2","broadcast":true,"pushType":"liveactivity","topic":"\#(Self.bundle)"\#(schedule),"#
                    + #""messages":{"en":{"event":"update","timestamp":"{now:int}","content-state":{"n":"{n:int}"}}}}"#
                try job.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
                return
            }
            let messages = #"{"en":{"alert":"Number {n}"}}"#
            let rules: String
            switch row.rules {
            case .none: rules = #","messages":\#(messages)"#
            case .cap: rules = Self.capRule + #","messages":\#(messages)"#
            case .variants:
                rules = #","variants":[{"name":"A","weight":45,"messages":\#(messages)},{"name":"B","weight":45,"messages":\#(messages)},"#
                    + #"{"name":"control","weight":10,"holdout":true}]"#
            }
            try #"{"campaign":"matrix",\#(format)\#(schedule)\#(rules)}"#.write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
            // Tokens of its own per row (FNV-1a of the row's name).
            var rng = SplitMix64(seed: row.testDescription.utf8.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 })
            var rows = ["token,lang,tz,n"], other = ["token,lang,n"]
            for n in 0..<PairwiseMatrixTests.records {
                let token = (0..<4).map { _ in String(format: "%016llx", rng.next()) }.joined()
                let ahead = n < PairwiseMatrixTests.aheadRecords ? 1 : 0
                offsets[token] = ahead
                rows.append("\(token),en,\(ZoneDatabase.offsetName(ahead * 60)),\(n)")
                if Self.otherCampaignLines.contains(n) { other.append("\(token),en,\(n)") }
            }
            try rows.joined(separator: "\n").write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
            if row.rules == .cap {
                try other.joined(separator: "\n").write(toFile: dir.file("other.csv"), atomically: true, encoding: .utf8)
                try #"{"campaign":"other",\#(format)\#(Self.capRule),"messages":{"en":{"alert":"Other {n}"}}}"#
                    .write(toFile: dir.file("other.json"), atomically: true, encoding: .utf8)
            }
        }

        /// The plan file (or part) the send reads; a pipe's plan is made by the run itself.
        var planPath: String { row.input == .part ? "parts/part-001.plan" : "plan.ndjson" }
        var ledgerOptions: [String] { row.rules == .cap ? ["--ledger", "ledger"] : [] }

        /// Plans (to a file, or in 2 parts) and returns the tokens the send must deliver; keeps the holdout's.
        /// For a pipe, plans once to a file beside it only to read the tokens.
        func plannedTokens() throws -> Set<String> {
            let out = row.input == .part ? ["--parts", "2", "--out", "parts"] : ["--out", "plan.ndjson"]
            let plan = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--shards", "16"] + out + ledgerOptions, in: dir)
            #expect(plan.status == 0, "\(plan.err)")
            let reader = try PlanReader(path: dir.file(planPath))
            var tokens = Set<String>()
            // The record names a device by its token in hex, a channel by its id in base64.
            while let r = try reader.next() {
                tokens.insert(row.target == .broadcast ? ChannelID(bytes: Array(r.token)).base64 : r.token.map { String(format: "%02x", $0) }.joined())
            }
            for path in ["plan.ndjson.holdout.ndjson", "parts/holdout.ndjson"] {
                guard let text = try? String(contentsOfFile: dir.file(path), encoding: .utf8) else { continue }
                for line in text.split(separator: "\n") { holdout.insert(try #require(JSONValue.parse(String(line))["token"]?.stringValue)) }
            }
            if row.input == .pipe { try FileManager.default.removeItem(atPath: dir.file("plan.ndjson")) }
            return tokens
        }

        var credentials: [String] { row.target == .h2Token ? ProxyTests.tokenCredentials : SendProcessTests.credentials() }

        /// A cap's other campaign of the scope, planned and sent (directly, to its end) with the ledger; the devices it reached.
        func sendAnotherCampaignOfTheScope() throws -> Set<String> {
            guard row.rules == .cap else { return [] }
            let plan = try PlanProcessTests.run(["plan", "other.json", "other.csv", "--out", "other.plan", "--rejects", "other.rejects.ndjson"] + ledgerOptions, in: dir)
            #expect(plan.status == 0, "\(plan.err)")
            let send = try CampaignProcess(["send", "other.plan", "--journal", "j-other", "--gateway", "127.0.0.1:\(simulator.port)"] + ledgerOptions + credentials,
                                           in: dir.path, environment: ProxyTests.cleanEnvironment)
            #expect(send.wait(timeout: PairwiseMatrixTests.bound) == 0, "\(send.stderr)")
            let reached = Set(try arrivals(campaign: "Other").keys)
            #expect(reached.count == Self.otherCampaignLines.count, "the other campaign reached its devices")
            return reached
        }

        var sendOptions: [String] {
            ["--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--connections", "2",
             "--rate", String(row.interruption == .none ? PairwiseMatrixTests.rate : PairwiseMatrixTests.interruptedRate)]
                + (proxy.map { ["--proxy", $0.url()] } ?? []) + ledgerOptions + credentials
        }

        /// The first run: `plan | send`, or `send PLAN`.
        func start() throws -> (send: CampaignProcess, planner: CampaignProcess?) {
            let environment = ProxyTests.cleanEnvironment
            guard row.input == .pipe else {
                return (try CampaignProcess(["send", planPath] + sendOptions, in: dir.path, environment: environment), nil)
            }
            let pipe = Pipe()
            let planner = try CampaignProcess(["plan", "job.json", "audience.csv", "--shards", "16", "--rejects", "rejects.ndjson"] + ledgerOptions,
                                              in: dir.path, outputPipe: pipe, environment: environment)
            let send = try CampaignProcess(["send"] + sendOptions, in: dir.path, inputPipe: pipe, environment: environment)
            return (send, planner)
        }

        /// `campaign cancel journal`: it exits 0 (once the send, if one runs, has ended).
        func cancel() throws {
            let cancel = try CancelTests.cancel(["journal", "--by", "matrix"], in: dir)
            #expect(cancel.status == 0, "\(cancel.err)")
        }

        /// When each notification of `campaign` (its alert's first word) arrived (UNIX milliseconds), by token, every arrival kept.
        func arrivals(campaign: String = "Number") throws -> [String: [Int64]] {
            guard let text = try? String(contentsOfFile: dir.file("record.ndjson"), encoding: .utf8) else { return [:] }
            var out: [String: [Int64]] = [:]
            for line in text.split(separator: "\n") {
                let v = try JSONValue.parse(String(line))
                if row.target == .broadcast {
                    guard v["kind"]?.stringValue == "broadcast" else { continue }
                    out[try #require(v["channel"]?.stringValue), default: []].append(try #require(v["received_ms"]?.integerValue))
                    continue
                }
                let payload = try JSONValue.parse(try #require(v["payload"]?.stringValue))
                guard try #require(payload["aps"]?["alert"]?.stringValue).hasPrefix(campaign + " ") else { continue }
                out[try #require(v["token"]?.stringValue), default: []].append(try #require(v["received_ms"]?.integerValue))
            }
            return out
        }

        /// The invariants every row asserts, from the simulator's record, the journal and `status --json`; the duplicates, and those reported.
        @discardableResult
        func expectEachOnceOnTime(_ expected: Set<String>, planned: Set<String>, otherReached: Set<String>,
                                  cancelledAt: Int64?) throws -> (duplicates: Int, reported: Int) {
            let arrivals = try self.arrivals()
            let state = try Journal.read(directory: dir.file("journal"))
            if let cancelledAt {
                #expect(Set(arrivals.keys).isSubset(of: expected), "\(Set(arrivals.keys).subtracting(expected).count) not planned")
                let after = arrivals.values.joined().filter { $0 > cancelledAt }
                #expect(after.isEmpty, "\(after.count) arrived after the cancel had ended the send")
                #expect(state.outcome == .cancelled, "\(state.outcome.map { "\($0)" } ?? "none")")
            } else {
                #expect(Set(arrivals.keys) == expected, "\(expected.subtracting(arrivals.keys).count) lost, \(Set(arrivals.keys).subtracting(expected).count) not planned")
                // A piped plan is made after the other campaign went: the plan itself leaves its devices out.
                let capped = planned.intersection(otherReached).count
                let done = planned.count - (row.input == .pipe ? capped : 0)
                #expect(state.outcome == .complete && state.doneCount == done, "\(state.outcome.map { "\($0)" } ?? "none"), \(state.doneCount) done of \(done)")
                if row.rules == .cap && row.input != .pipe {
                    let json = try VariantSendTests.statusJSON(dir)
                    #expect(json["skipped_frequency_capped"]?.integerValue == Int64(capped), "the devices the cap stopped: \(json)")
                }
            }
            let both = Set(arrivals.keys).intersection(otherReached)
            #expect(both.isEmpty, "\(both.count) devices reached by both campaigns of a cap of 1")
            let heldOut = Set(arrivals.keys).intersection(holdout)
            #expect(heldOut.isEmpty, "\(heldOut.count) held-out devices reached")
            if row.rules == .variants {
                let json = try VariantSendTests.statusJSON(dir)
                var sums = [Int64](repeating: 0, count: 3)
                for (_, v) in json["variants"]?.objectMembers ?? [] {
                    for (k, key) in ["accepted", "failed", "skipped"].enumerated() { sums[k] += v[key]?.integerValue ?? 0 }
                }
                #expect(json["variants"]?.objectMembers.map { $0.map(\.0).sorted() } == ["A", "B"], "\(json)")
                #expect(sums == ["accepted", "failed", "skipped"].map { json[$0]?.integerValue ?? -1 }, "per-variant counts add up to the totals: \(json)")
            }
            let duplicates = arrivals.values.reduce(0) { $0 + $1.count - 1 }
            #expect(duplicates <= state.duplicatesRisked, "\(duplicates) duplicates but \(state.duplicatesRisked) reported")
            // Per zone (minutes ahead of UTC): the arrivals before their moment or inside their quiet hours, in ms from its start.
            var early: [Int: [Int64]] = [:], quietSent: [Int: [Int64]] = [:]
            for (token, times) in arrivals {
                let minutes = offsets[token] ?? 0
                let due = (moment - Int64(minutes) * 60) * 1000
                switch row.schedule {
                case .none: break
                case .deliverAt:
                    if let first = times.min(), first < due { early[minutes, default: []].append(first - due) }
                case .quietHours:
                    // Quiet on the device's clock from moment − 30 s to moment: in UTC, its offset earlier.
                    let quiet = (due - Self.quietLength * 1000)..<due
                    let inside = times.filter { quiet.contains($0) }.map { $0 - quiet.lowerBound }
                    if !inside.isEmpty { quietSent[minutes, default: []] += inside }
                }
            }
            #expect(early.keys.isEmpty, "sent before their moment, by zone: \(early.mapValues { "\($0.count), up to \(-($0.min() ?? 0)) ms early" })")
            #expect(quietSent.keys.isEmpty, "sent inside their quiet hours, by zone: \(quietSent.mapValues { "\($0.count), from \($0.min() ?? 0) ms in" })")
            return (duplicates, state.duplicatesRisked)
        }
    }
}

extension CampaignProcess {
    /// Its exit status once it has ended, or nil after `seconds`; waits without holding a thread.
    func exitStatus(within seconds: Double) async -> Int32? {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let status = wait(timeout: 0) { return status }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return wait(timeout: 0)
    }
}
