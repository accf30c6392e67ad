import Testing
import CampaignTLS

/// `NO_PROXY` as curl (7.86 and later) reads it: names match by domain,
/// IP addresses only exactly or by CIDR block.
@Suite struct NoProxyTests {
    static let table: [(list: String, host: String, bypass: Bool)] = [
        ("127.0.0.0/8", "127.0.0.1", true),
        ("127.0.0.0/8", "127.255.3.4", true),
        ("127.0.0.0/8", "128.0.0.1", false),
        ("10.0.0.0/8, 192.168.0.0/16", "192.168.7.9", true),
        ("192.168.0.0/24", "192.168.1.1", false),
        ("127.0.0.1", "127.0.0.1", true),
        ("127.0.0.1/32", "127.0.0.1", true),
        ("127.0.0.1/32", "127.0.0.2", false),
        (".0.0.1", "127.0.0.1", false),
        ("0.0.1", "127.0.0.1", false),
        ("127.0.0.0/33", "127.0.0.1", false),
        ("127.0.0.0/x", "127.0.0.1", false),
        ("::1/128", "::1", true),
        ("::1/128", "[::1]", true),
        ("::1", "[::1]", true),
        ("[::1]", "::1", true),
        ("fe80::/10", "fe80::1:2", true),
        ("fe80::/10", "fec0::1", false),
        ("2001:db8::/32", "2001:db8:ffff::1", true),
        ("127.0.0.0/8", "::1", false),
        ("::1/128", "127.0.0.1", false),
        ("*", "10.1.2.3", true),
        ("apple.com", "api.push.apple.com", true),
        (".push.apple.com", "api.push.apple.com", true),
        ("push.apple", "api.push.apple.com", false),
        ("notapple.com", "apple.com", false),
        ("127.0.0.0/8", "localhost", false),
        ("LOCALHOST", "localhost", true),
    ]

    @Test(arguments: table.indices)
    func matchesAsCurl(_ i: Int) {
        let row = Self.table[i]
        #expect(HTTPProxy.bypasses(row.host, list: row.list) == row.bypass, "NO_PROXY=\(row.list) host \(row.host)")
    }

    @Test func theEnvironmentsCIDREntryKeepsLoopbackDirect() throws {
        let env = ["HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "127.0.0.0/8,::1/128"]
        #expect(try HTTPProxy.fromEnvironment(for: "127.0.0.1", environment: env) == nil)
        #expect(try HTTPProxy.fromEnvironment(for: "::1", environment: env) == nil)
        #expect(try HTTPProxy.fromEnvironment(for: "api.push.apple.com", environment: env)?.host == "proxy.corp")
    }
}
