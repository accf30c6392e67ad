import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
import CampaignTLS
@testable import GatewayClient

/// The one token a send's connections share: renewed after 50 minutes, never
/// within 20, kept (0600) for a resume.
@Suite struct ProviderTokenSourceTests {
    static let t0: Int64 = 1_800_000_000

    static func source(_ dir: TemporaryDirectory, now: Int64) throws -> ProviderTokenSource {
        try ProviderTokenSource(keyPath: TestCertificates.path(DevelopmentCertificates.authKey), keyID: "DEVKEY0001", teamID: "DEVTEAM001",
                                cachePath: dir.file("token.json"), now: now)
    }

    @Test func aTokenIsRenewedAfterFiftyMinutesAndNeverWithinTwenty() throws {
        let dir = TemporaryDirectory("tokensource")
        let source = try Self.source(dir, now: Self.t0)
        let first = source.current(now: Self.t0)
        #expect(first.issuedAt == Self.t0)
        #expect(source.current(now: Self.t0 + 49 * 60).text == first.text)
        #expect(source.expired(first, now: Self.t0 + 19 * 60).text == first.text, "APNs' expiry of a 19-minute-old token is not answered with a new one")
        let renewed = source.expired(first, now: Self.t0 + 21 * 60)
        #expect(renewed.text != first.text && renewed.issuedAt == Self.t0 + 21 * 60)
        #expect(source.expired(first, now: Self.t0 + 22 * 60).text == renewed.text, "another connection's late report of the old token renews nothing")
        let later = source.current(now: Self.t0 + 21 * 60 + 50 * 60)
        #expect(later.text != renewed.text)
        #expect(try FileManager.default.attributesOfItem(atPath: dir.file("token.json"))[.posixPermissions] as? Int == 0o600)
    }

    @Test func aResumeReusesTheKeptTokenUntilItIsFiftyMinutesOld() throws {
        let dir = TemporaryDirectory("tokenkept")
        let kept = try Self.source(dir, now: Self.t0).current(now: Self.t0)
        #expect(try Self.source(dir, now: Self.t0 + 10 * 60).current(now: Self.t0 + 10 * 60).text == kept.text)
        #expect(try Self.source(dir, now: Self.t0 + 51 * 60).current(now: Self.t0 + 51 * 60).text != kept.text)
        // A kept token of another key id is not reused.
        let other = try ProviderTokenSource(keyPath: TestCertificates.path(DevelopmentCertificates.authKey), keyID: "OTHERKEY00",
                                            teamID: "DEVTEAM001", cachePath: dir.file("token.json"), now: Self.t0 + 60)
        #expect(other.current(now: Self.t0 + 60).keyID == "OTHERKEY00")
    }
}

/// A fleet of processes on one `--token-cache` directory: one signing per
/// renewal between them all, however many there are.
@Suite struct SharedProviderTokenTests {
    static let t0 = ProviderTokenSourceTests.t0

    static func source(_ path: String, now: Int64) throws -> ProviderTokenSource {
        try ProviderTokenSource(keyPath: TestCertificates.path(DevelopmentCertificates.authKey), keyID: "DEVKEY0001", teamID: "DEVTEAM001",
                                cachePath: path, now: now)
    }

    @Test func sixteenStartingAtOnceSignOneTokenAndUseIt() throws {
        let dir = TemporaryDirectory("tokenfleet")
        let path = ProviderTokenSource.sharedCachePath(directory: dir.path, keyID: "DEVKEY0001")
        // Each starts on a thread of its own, at once; a lock-free slot each.
        let slots = UnsafeMutableBufferPointer<ProviderTokenSource?>.allocate(capacity: 16)
        slots.initialize(repeating: nil)
        defer { slots.deinitialize(); slots.deallocate() }
        nonisolated(unsafe) let shared = slots
        DispatchQueue.concurrentPerform(iterations: 16) { i in shared[i] = try? Self.source(path, now: Self.t0 + Int64(i)) }
        let made = slots.compactMap { $0 }
        #expect(made.count == 16)
        #expect(made.reduce(0) { $0 + $1.signed } == 1, "one signing for the fleet")
        #expect(Set(made.map { $0.current(now: Self.t0 + 40 * 60).text }).count == 1)
        #expect(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int == 0o600)
    }

    @Test func aRenewalByOneIsPickedUpByTheOthers() throws {
        let dir = TemporaryDirectory("tokenrenew")
        let path = ProviderTokenSource.sharedCachePath(directory: dir.path, keyID: "DEVKEY0001")
        let fleet = try (0..<4).map { try Self.source(path, now: Self.t0 + Int64($0)) }
        let first = fleet[0].current(now: Self.t0)
        let renewed = fleet[0].current(now: Self.t0 + 50 * 60)
        #expect(renewed.text != first.text)
        for (i, s) in fleet.enumerated().dropFirst() {
            #expect(s.current(now: Self.t0 + 50 * 60 + Int64(i)).text == renewed.text, "process \(i) takes the renewed token")
        }
        #expect(fleet.reduce(0) { $0 + $1.signed } == 2)

        // APNs calls the renewed token expired on two processes: one new token between them.
        let later = Self.t0 + 50 * 60 + 21 * 60
        let fresh = fleet[1].expired(renewed, now: later)
        #expect(fresh.text != renewed.text)
        #expect(fleet[2].expired(renewed, now: later + 1).text == fresh.text, "the other finds it in the cache")
        #expect(fleet.reduce(0) { $0 + $1.signed } == 3)
    }

    @Test func withoutAFileTheTwentyMinuteRuleStillHolds() throws {
        let source = try ProviderTokenSource(keyPath: TestCertificates.path(DevelopmentCertificates.authKey), keyID: "DEVKEY0001",
                                             teamID: "DEVTEAM001", now: Self.t0)
        let first = source.current(now: Self.t0)
        #expect(source.expired(first, now: Self.t0 + 60).text == first.text)
        #expect(source.expired(first, now: Self.t0 + 21 * 60).text != first.text)
    }
}
