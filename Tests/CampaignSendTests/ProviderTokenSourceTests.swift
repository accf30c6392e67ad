import Foundation
import Testing
import CampaignIO
import CampaignTestSupport
import CampaignTLS
@testable import CampaignSend

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
