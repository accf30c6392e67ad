import Foundation
import Testing
import APNSWire
import CampaignIO
import CampaignPlan
import CampaignTestSupport
import FeedbackStore
import GatewaySimulator
@testable import CampaignSend
@testable import SendJournal

/// One kind of trouble the simulator makes.
enum ChaosFault: String, CaseIterable {
    case badTokens = "status 8"
    case shutdowns = "status 10"
    case processingErrors = "status 1"
    case hardDrops = "hard drops"
    case slowReads = "slow reads"
    case everything = "all at once"

    /// The faults, given the plan's tokens (bad tokens are drawn from them).
    func plan(tokens: [String], rng: inout SplitMix64) -> FaultPlan {
        var faults = FaultPlan()
        faults.seed = rng.next()
        func bad() -> Set<[UInt8]> {
            Set((0..<12).map { _ in DeviceToken(hex: tokens[Int(rng.next() % UInt64(tokens.count))])!.bytes })
        }
        switch self {
        case .badTokens: faults.badTokens = bad()
        case .shutdowns: faults.shutdownAfter = 150
        case .processingErrors: faults.errorRate = 0.01
        case .hardDrops: faults.dropEvery = 300
        case .slowReads: faults.readDelayMilliseconds = 2
        case .everything:
            faults.badTokens = bad()
            faults.shutdownAfter = 400
            faults.errorRate = 0.005
            faults.dropEvery = 250
            faults.readDelayMilliseconds = 1
        }
        return faults
    }
}

/// Totals over the matrix, for docs/reliability.md.
struct ChaosTotals {
    var runs = 0, notifications = 0, lost = 0, duplicates = 0, duplicatesBound = 0
    var refusedStatus8 = 0, refusedStatus1 = 0, shutdowns = 0, drops = 0, resends = 0
}

@Suite(.serialized, .ownThreads) struct ChaosMatrixTests {
    static let notificationsPerRun = 1500
    static let formats = ["enhanced", "frame"]
    static let connectionCounts = [1, 2, 4]

    /// Every fault × connection count × wire format with error responses.
    /// Each run: every valid notification accepted exactly once (with hard
    /// drops: none lost, duplicates within what the report admits), none of
    /// the invalid ones, the journal complete, and the report agreeing with
    /// what the simulator counted.
    @Test func everyFaultEveryConnectionCountEveryFormat() throws {
        var rng = SplitMix64(seed: 2026)
        var totals = ChaosTotals()
        var lines: [String] = []
        for fault in ChaosFault.allCases {
            for format in Self.formats {
                for connections in Self.connectionCounts {
                    let cell = "\(fault.rawValue), \(format), \(connections) connection(s)"
                    try run(fault: fault, format: format, connections: connections, rng: &rng, totals: &totals, cell: cell, lines: &lines)
                }
            }
        }
        #expect(totals.runs == ChaosFault.allCases.count * Self.formats.count * Self.connectionCounts.count)
        #expect(totals.lost == 0)
        #expect(totals.duplicates <= totals.duplicatesBound)
        #expect(totals.refusedStatus8 > 0 && totals.refusedStatus1 > 0 && totals.shutdowns > 0 && totals.drops > 0)
        let summary = """
        chaos matrix: \(totals.runs) runs, \(totals.notifications) notifications; injected: \(totals.refusedStatus8) status 8, \
        \(totals.refusedStatus1) status 1, \(totals.shutdowns) shutdowns, \(totals.drops) hard drops; \
        \(totals.resends) resends; lost \(totals.lost); duplicates \(totals.duplicates) (bound \(totals.duplicatesBound))
        """
        print(lines.joined(separator: "\n"))
        print(summary)
        if let path = ProcessInfo.processInfo.environment["CAMPAIGN_CHAOS_REPORT"] {
            try (lines + [summary]).joined(separator: "\n").appending("\n").write(toFile: path, atomically: true, encoding: .utf8)
        }
    }

    func run(fault: ChaosFault, format: String, connections: Int, rng: inout SplitMix64,
             totals: inout ChaosTotals, cell: String, lines: inout [String]) throws {
        // The plan is made first: the bad tokens are drawn from it.
        let planning = try SendHarness(faults: FaultPlan())
        let tokens = try makePlan(count: Self.notificationsPerRun, format: format, in: planning.dir, seed: rng.next())
        let faults = fault.plan(tokens: tokens, rng: &rng)
        let harness = try SendHarness(faults: faults)
        try FileManager.default.copyItem(atPath: planning.dir.file("plan.ndjson"), toPath: harness.dir.file("plan.ndjson"))

        let report = try harness.send(connections: connections) { $0.batchBytes = 4096 }
        // Stopped first (recordedTokens stops it), so every session has
        // recorded how it ended: read before, the last shutdown could be
        // missing from the counts (seen: report 10 shutdowns, simulator 9).
        let recorded = try harness.recordedTokens()
        let statistics = harness.simulator.currentStatistics()
        let bad = Set(faults.badTokens.map { DeviceToken(bytes: $0).hex })
        let expected = Set(tokens).subtracting(bad)
        let unique = Set(recorded)
        // A processing error (status 1) is the gateway's trouble: retried after
        // a backoff, never final, so every valid notification ends accepted.
        let state = try Journal.read(directory: harness.dir.file("journal"))
        let lost = expected.subtracting(unique).count
        let duplicates = recorded.count - unique.count
        let dropped = statistics.connections.filter { $0.ending?.hasPrefix("dropped") == true }.count
        let shutDown = statistics.connections.filter { $0.ending?.hasPrefix("shut down") == true }.count

        #expect(report.outcome == .complete, "\(cell): \(report.message ?? "")")
        #expect(lost == 0, "\(cell): \(lost) lost")
        #expect(unique.isDisjoint(with: bad), "\(cell): a refused token was recorded as accepted")
        #expect(unique == expected, "\(cell)")
        #expect(state.failures.allSatisfy { $0.status == 8 && !$0.gaveUp }, "\(cell): \(state.failures.map(\.reason))")
        if faults.dropEvery == nil {
            #expect(duplicates == 0, "\(cell): \(duplicates) duplicates without a hard drop")
            #expect(report.duplicatesRisked == 0, "\(cell)")
        } else {
            #expect(duplicates <= report.duplicatesRisked, "\(cell): \(duplicates) duplicates, \(report.duplicatesRisked) reported")
        }
        #expect(report.accepted == expected.count, "\(cell)")
        #expect(report.failedByStatus[8, default: 0] == bad.count, "\(cell)")
        #expect(report.failed == bad.count, "\(cell): \(report.failedByStatus)")
        #expect(statistics.rejected[8, default: 0] == bad.count, "\(cell): the simulator refused \(statistics.rejected[8, default: 0]) with status 8")
        #expect(report.shutdowns == shutDown, "\(cell): report \(report.shutdowns) shutdowns, simulator \(shutDown)")
        #expect(report.drops == dropped, "\(cell): report \(report.drops) drops, simulator \(dropped)")
        #expect(state.outcome == .complete, "\(cell)")
        #expect(state.doneCount == tokens.count, "\(cell)")
        if !bad.isEmpty {
            let store = try FeedbackStore.load(path: harness.dir.file("store.ndjson"))
            #expect(Set(store.entries.keys.map { DeviceToken(bytes: $0).hex }) == bad, "\(cell)")
        }

        totals.runs += 1
        totals.notifications += tokens.count
        totals.lost += lost
        totals.duplicates += duplicates
        totals.duplicatesBound += report.duplicatesRisked
        totals.refusedStatus8 += statistics.rejected[8, default: 0]
        totals.refusedStatus1 += statistics.rejected[1, default: 0]
        totals.shutdowns += shutDown
        totals.drops += dropped
        totals.resends += report.resends
        lines.append("\(cell): \(report.accepted) accepted, \(report.failed) refused, \(shutDown) shutdowns, \(dropped) drops, " +
                     "\(statistics.rejected[1, default: 0]) status 1, \(report.resends) resends, \(duplicates) duplicates (bound \(report.duplicatesRisked))")
    }
}
