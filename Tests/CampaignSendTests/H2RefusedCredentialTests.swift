import Testing
@testable import CampaignSend
@testable import GatewayClient
@testable import H2Provider

/// What a send says when the gateway refuses its credential (403).
@Suite struct H2RefusedCredentialTests {
    @Test func aRefusedCredentialSentenceNamesTheCredentialInUse() {
        let refused = H2Answer(status: 403, reason: "InvalidProviderToken")
        let token = H2ConnectionWorker.sentence(for: refused, topic: "com.example.campaign", tokenAuth: true)
        let certificate = H2ConnectionWorker.sentence(for: refused, topic: "com.example.campaign", tokenAuth: false)
        #expect(token.contains("--auth-key") && !token.contains("--cert"), "\(token)")
        #expect(certificate.contains("--cert") && !certificate.contains("check that --auth-key"), "\(certificate)")
    }
}
