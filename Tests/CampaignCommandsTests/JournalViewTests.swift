import Foundation
import Testing
import CampaignJSON
import PlanStream
import CampaignTestSupport
@testable import CampaignCommands
@testable import SendJournal

/// How `status` tells a journal whose send ends while it looks.
@Suite struct JournalViewTests {
    static func runningJournal(in dir: TemporaryDirectory) throws -> Journal {
        var settings = SendSettings(gatewayHost: "127.0.0.1", gatewayPort: 2197, certificate: "c.pem")
        settings.planPath = dir.file("gone.plan")
        return try Journal.create(directory: dir.file("j"), settings: settings, planHeader: .null)
    }

    /// The send ends (its end record written, its lock let go) just as
    /// `status` first asks who holds the lock: status tells the end, not a
    /// stopped send with a command that would resume it.
    @Test(arguments: [SendOutcome.complete, .gaveUp])
    func aSendThatEndsAsStatusLooksIsToldByItsEnd(outcome: SendOutcome) throws {
        let dir = TemporaryDirectory("journal-view")
        var journal: Journal? = try Self.runningJournal(in: dir)
        var looks = 0
        let view = try JournalView(directory: dir.file("j")) { _ in
            looks += 1
            if let ending = journal {
                try? ending.append(.end(outcome: outcome, seconds: 1))
                try? ending.flush()
                journal = nil
            }
            return nil
        }
        #expect(view.state.outcome == outcome)
        #expect(view.phase == (outcome == .complete ? .complete : .stopped))
        #expect(outcome == .complete || view.resumeCommand != nil, "a send that gave up is resumed")
        #expect(looks >= 1)
    }

    /// It held the lock when status first looked, and the journal read after
    /// had no end: it was running then, however the next look would answer.
    @Test func aSendHoldingTheLockBeforeTheJournalIsReadIsRunning() throws {
        let dir = TemporaryDirectory("journal-view")
        let journal = try Self.runningJournal(in: dir)
        var answers: [Int32?] = [4242, nil]
        let view = try JournalView(directory: dir.file("j")) { _ in answers.isEmpty ? nil : answers.removeFirst() }
        #expect(view.phase == .running && view.running == 4242)
        #expect(view.resumeCommand == nil)
        _ = journal
    }

    /// A send that was killed (no end record, nobody holds the lock) is stopped, with its resume.
    @Test func aKilledSendIsStopped() throws {
        let dir = TemporaryDirectory("journal-view")
        _ = try Self.runningJournal(in: dir)   // released at once: the lock is let go with no end record
        let view = try JournalView(directory: dir.file("j"))
        #expect(view.phase == .stopped && view.resumeCommand == "campaign send --resume \(dir.file("j"))")
    }
}

/// The campaign's rate `status` tells over parts given different rates: the
/// lowest a sending part was given, as the sends keep to it.
@Suite struct PartsViewRateTests {
    @Test func partsGivenDifferentRatesAreToldWithTheLowestSendingOne() throws {
        let dir = TemporaryDirectory("parts-rate")
        let hash = "fade"
        let job = try PartJournals.start(0, in: dir.file("j/000"), hash: hash)                       // the job's 54,000 a minute
        let own = try PartJournals.start(1, in: dir.file("j/001"), hash: hash, rateTotal: 600)      // 36,000
        _ = try PartJournals.start(2, in: dir.file("j/002"), hash: hash, rateTotal: 300)            // 18,000, not sending
        let journals = ["000", "001", "002"].map { dir.file("j/\($0)") }
        let view = try PartsView(manifestPath: nil, journals: journals)
        #expect(view.campaignRatePerMinute == 36_000)
        #expect(view.ratesGivenPerMinute == [18_000, 36_000, 54_000])
        #expect(view.text.contains("campaign rate: 36000 a minute over every part (600/s; the parts were given 18000, 36000, 54000 a minute, and those sending keep to the lowest of theirs)"), "\(view.text)")
        #expect(view.json["campaign_rates_given_per_minute"] == .array([.number("18000"), .number("36000"), .number("54000")]))
        _ = (job, own)
    }

    /// A part resumed with its own `--rate-total` is told by the rate its latest run was given.
    @Test func aPartResumedWithItsOwnRateIsToldByIt() throws {
        let dir = TemporaryDirectory("parts-rate")
        let first = try PartJournals.start(0, in: dir.file("j/000"), hash: "fade")
        let resumed = try PartJournals.start(1, in: dir.file("j/001"), hash: "fade")
        try resumed.append(.start(settings: PartJournals.settings(1, rateTotal: 500), planHeader: PartJournals.header(1, hash: "fade").json))
        try resumed.flush()
        let view = try PartsView(manifestPath: nil, journals: [dir.file("j/000"), dir.file("j/001")])
        #expect(view.campaignRatePerMinute == 30_000 && view.ratesGivenPerMinute == [30_000, 54_000])
        _ = first
    }

    @Test func partsGivenOneRateAreToldItAlone() throws {
        let dir = TemporaryDirectory("parts-rate")
        let parts = try (0..<3).map { try PartJournals.start($0, in: dir.file("j/00\($0)"), hash: "fade") }
        let view = try PartsView(manifestPath: nil, journals: (0..<3).map { dir.file("j/00\($0)") })
        #expect(view.campaignRatePerMinute == 54_000 && view.ratesGivenPerMinute == [54_000])
        #expect(view.text.contains("campaign rate: 54000 a minute over every part (900/s); now 0/s"), "\(view.text)")
        _ = parts
    }
}
