import Foundation
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
/// HTTP/2, or the binary interface in either of its framed formats.
enum MatrixWire: String, MatrixFactor { case http2, enhanced, frame }
enum MatrixRoute: String, MatrixFactor { case direct, proxy }
/// What happens to the first run: nothing, `kill -9`, or SIGTERM; an interrupted run is followed by `send --resume`.
enum MatrixInterruption: String, MatrixFactor { case none, kill9, sigterm }

/// One run of the matrix: a value of each factor. A new factor is a new
/// stored property here (an enum conforming to ``MatrixFactor``) and a new
/// column in ``PairwiseMatrixTests/coveringArray``: the pair check finds
/// the factors by reflection.
struct MatrixRow: Sendable, CustomTestStringConvertible {
    var input: MatrixInput
    var schedule: MatrixSchedule
    var wire: MatrixWire
    var route: MatrixRoute
    var interruption: MatrixInterruption

    init(_ input: MatrixInput, _ schedule: MatrixSchedule, _ wire: MatrixWire, _ route: MatrixRoute, _ interruption: MatrixInterruption) {
        (self.input, self.schedule, self.wire, self.route, self.interruption) = (input, schedule, wire, route, interruption)
    }

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
/// every notification delivered, duplicates no more than the journal reports,
/// none before its moment nor inside its quiet hours, and the exit codes.
///
/// The rows run concurrently, each on a thread of its own (`.ownThreads`):
/// a row waits for events (notifications recorded, a process's end) that a
/// loaded machine's cooperative threads, busy with other suites, must not
/// delay by seconds.
@Suite(.ownThreads) struct PairwiseMatrixTests {
    /// The covering array: 10 rows for 3·3·3·3·2 values (an L9 orthogonal
    /// array for the four three-valued factors, the route chosen so it meets
    /// each of their values both ways, and one row for the pairs left).
    static let coveringArray: [MatrixRow] = [
        //     input       schedule      wire        route     interruption
        .init(.pipe,      .none,        .http2,     .direct,  .none),
        .init(.pipe,      .deliverAt,   .enhanced,  .direct,  .sigterm),
        .init(.pipe,      .quietHours,  .frame,     .direct,  .kill9),
        .init(.planFile,  .none,        .enhanced,  .direct,  .kill9),
        .init(.planFile,  .deliverAt,   .frame,     .proxy,   .none),
        .init(.planFile,  .quietHours,  .http2,     .proxy,   .sigterm),
        .init(.part,      .none,        .frame,     .direct,  .sigterm),
        .init(.part,      .deliverAt,   .http2,     .proxy,   .kill9),
        .init(.part,      .quietHours,  .enhanced,  .proxy,   .none),
        .init(.pipe,      .none,        .http2,     .proxy,   .kill9),
    ]

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
                        missing.append("\(factors[i].name)=\(a) & \(factors[j].name)=\(b)")
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
        #expect((10...15).contains(rows.count))
        // The check can fail: without its last row, pairs are left uncovered.
        #expect(Self.uncoveredPairs(Array(rows.dropLast())).contains("input=pipe & route=proxy"))
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
        let expected = try run.plannedTokens()
        #expect(expected.count >= (row.input == .part ? Self.records / 4 : Self.records), "the plan holds the audience")

        let started = Date()
        let first = try run.start()
        var arrivedBeforeInterruption = 0
        switch row.interruption {
        case .none:
            let status = await first.send.exitStatus(within: Self.bound)
            #expect(status == 0, "\(first.send.stderr)")
        case .kill9, .sigterm:
            // Mid-send: once 40% are recorded by the gateway (and a piped plan is all spooled, so a plain --resume can go on).
            let due = expected.count * 2 / 5
            let event = waitForEvent(of: first.send, backstop: Self.bound) {
                run.simulator.currentStatistics().accepted >= due && (row.input != .pipe || PipelineCrashTests.spoolIsComplete(run.dir))
            }
            if case .ended(let status) = event {
                // Over before its interruption: not the product's fault if it delivered everything.
                let state = try? Journal.read(directory: run.dir.file("journal"))
                #expect(status == 0 && state?.outcome == .complete, "the first run ended (\(status)) before \(due) were recorded: \(first.send.stderr)")
                guard status == 0 && state?.outcome == .complete else { return true }
                print("matrix \(row.testDescription): attempt \(attempt): the first run ended before its interruption; again")
                return false
            }
            #expect(event == .came, "\(due) not recorded in \(Int(Self.bound)) s: \(first.send.stderr)")
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
            #expect(state.outcome != .complete && state.doneCount < expected.count, "interrupted mid-send: \(state.doneCount) done of \(expected.count)")
            let tunnels = run.proxy?.connectsLogged ?? 0
            let resumed = try CampaignProcess(["send", "--resume", "journal"], in: run.dir.path, environment: ProxyTests.cleanEnvironment)
            let status = await resumed.exitStatus(within: Self.bound)
            #expect(status == 0, "\(resumed.stderr)")
            if let proxy = run.proxy { #expect(proxy.connectsLogged > tunnels, "the resume went through the proxy again") }
        }
        if let planner = first.planner {
            let status = await planner.exitStatus(within: Self.bound)
            #expect(status != nil, "the planner ended")
            if row.interruption == .none { #expect(status == 0, "\(planner.stderr)") }
        }
        if let proxy = run.proxy { #expect(proxy.connectsLogged >= 1, "the connections went through the proxy") }
        run.simulator.stop()
        let (duplicates, reported) = try run.expectEachOnceOnTime(expected)
        print("matrix \(row.testDescription): \(expected.count) planned, \(row.interruption == .none ? "not interrupted" : "interrupted after \(arrivedBeforeInterruption) arrived"), "
              + "\(duplicates) duplicates (\(reported) reported), \(String(format: "%.1f", Date().timeIntervalSince(started))) s")
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
        /// Quiet hours on every device's clock, as UNIX seconds of UTC's day.
        static let quietLength: Int64 = 30

        init(_ row: MatrixRow) throws {
            self.row = row
            simulator = row.wire == .http2 ? try startHTTP2Simulator(in: dir) : try SendProcessTests.simulator(in: dir)
            proxy = row.route == .proxy ? try TinyProxy(in: dir) : nil
            moment = ScheduledSendTests.soon(PairwiseMatrixTests.lead)
            try writeJobAndAudience()
        }

        func stop() {
            simulator.stop()
            proxy?.stop()
        }

        private func writeJobAndAudience() throws {
            let wire = row.wire == .http2 ? #""format":"h2","topic":"com.example.campaign""# : #""format":"\#(row.wire.rawValue)""#
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
            try #"{"campaign":"matrix",\#(wire)\#(schedule),"messages":{"en":{"alert":"Number {n}"}}}"#
                .write(toFile: dir.file("job.json"), atomically: true, encoding: .utf8)
            // Tokens of its own per row (FNV-1a of the row's name).
            var rng = SplitMix64(seed: row.testDescription.utf8.reduce(0xcbf2_9ce4_8422_2325 as UInt64) { ($0 ^ UInt64($1)) &* 0x100_0000_01b3 })
            var rows = ["token,lang,tz,n"]
            for n in 0..<PairwiseMatrixTests.records {
                let token = (0..<4).map { _ in String(format: "%016llx", rng.next()) }.joined()
                let ahead = n < PairwiseMatrixTests.aheadRecords ? 1 : 0
                offsets[token] = ahead
                rows.append("\(token),en,\(ZoneDatabase.offsetName(ahead * 60)),\(n)")
            }
            try rows.joined(separator: "\n").write(toFile: dir.file("audience.csv"), atomically: true, encoding: .utf8)
        }

        /// The plan file (or part) the send reads; a pipe's plan is made by the run itself.
        var planPath: String { row.input == .part ? "parts/part-001.plan" : "plan.ndjson" }

        /// Plans (to a file, or in 2 parts) and returns the tokens the send must deliver.
        /// For a pipe, plans once to a file beside it only to read the tokens.
        func plannedTokens() throws -> Set<String> {
            let out = row.input == .part ? ["--parts", "2", "--out", "parts"] : ["--out", "plan.ndjson"]
            let plan = try PlanProcessTests.run(["plan", "job.json", "audience.csv", "--shards", "16"] + out, in: dir)
            #expect(plan.status == 0, "\(plan.err)")
            let reader = try PlanReader(path: dir.file(planPath))
            var tokens = Set<String>()
            while let r = try reader.next() { tokens.insert(r.token.map { String(format: "%02x", $0) }.joined()) }
            if row.input == .pipe { try FileManager.default.removeItem(atPath: dir.file("plan.ndjson")) }
            return tokens
        }

        var sendOptions: [String] {
            ["--journal", "journal", "--gateway", "127.0.0.1:\(simulator.port)", "--connections", "2",
             "--rate", String(row.interruption == .none ? PairwiseMatrixTests.rate : PairwiseMatrixTests.interruptedRate)]
                + (proxy.map { ["--proxy", $0.url()] } ?? []) + SendProcessTests.credentials()
        }

        /// The first run: `plan | send`, or `send PLAN`.
        func start() throws -> (send: CampaignProcess, planner: CampaignProcess?) {
            let environment = ProxyTests.cleanEnvironment
            guard row.input == .pipe else {
                return (try CampaignProcess(["send", planPath] + sendOptions, in: dir.path, environment: environment), nil)
            }
            let pipe = Pipe()
            let planner = try CampaignProcess(["plan", "job.json", "audience.csv", "--shards", "16", "--rejects", "rejects.ndjson"],
                                              in: dir.path, outputPipe: pipe, environment: environment)
            let send = try CampaignProcess(["send"] + sendOptions, in: dir.path, inputPipe: pipe, environment: environment)
            return (send, planner)
        }

        /// When each accepted notification arrived (UNIX milliseconds), by token, every arrival kept.
        func arrivals() throws -> [String: [Int64]] { try ScheduledSendTests.arrivals(inRecord: dir.file("record.ndjson")) }

        /// The invariants every row asserts, from the simulator's record and the journal; the duplicates, and those reported.
        @discardableResult
        func expectEachOnceOnTime(_ expected: Set<String>) throws -> (duplicates: Int, reported: Int) {
            let arrivals = try self.arrivals()
            let state = try Journal.read(directory: dir.file("journal"))
            #expect(Set(arrivals.keys) == expected, "\(expected.subtracting(arrivals.keys).count) lost, \(Set(arrivals.keys).subtracting(expected).count) not planned")
            let duplicates = arrivals.values.reduce(0) { $0 + $1.count - 1 }
            #expect(duplicates <= state.duplicatesRisked, "\(duplicates) duplicates but \(state.duplicatesRisked) reported")
            #expect(state.outcome == .complete && state.doneCount == expected.count, "\(state.outcome.map { "\($0)" } ?? "none"), \(state.doneCount) done")
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
