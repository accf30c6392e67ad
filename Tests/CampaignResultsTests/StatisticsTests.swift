import Testing
@testable import CampaignResults

/// True when `value` is within `relative` of `reference`, relative to the
/// larger of the two; a reference of exactly 0 (a clipped bound, a z of 0)
/// must then be met exactly.
private func agrees(_ value: Double?, _ reference: Double, relative: Double = 1e-9) -> Bool {
    guard let value else { return false }
    return abs(value - reference) <= relative * max(abs(value), abs(reference))
}

/// True when `value`, rounded to 4 decimals as a paper prints it, is `printed`.
private func roundsTo(_ value: Double, _ printed: Double) -> Bool {
    abs(value - printed) <= 0.00005 + 1e-12
}

/// Worked examples from the papers that define the intervals; the digits are
/// those statsmodels 0.15 gives rounded to 4 decimals, which agree with the
/// ones quoted from the papers.
@Suite struct StatisticsPaperExamples {
    /// Newcombe R. G. (1998), "Interval estimation for the difference between
    /// independent proportions: comparison of eleven methods", Statistics in
    /// Medicine 17:873–890, Table II, method 10 (score interval for p1 − p2,
    /// no continuity correction), at 95%.
    static let newcombeTableII: [(Int, Int, Int, Int, Double, Double)] = [
        (56, 70, 48, 80, 0.0524, 0.3339),
        (9, 10, 3, 10, 0.1705, 0.8090),
        (6, 7, 2, 7, 0.0582, 0.8062),
        (5, 56, 0, 29, -0.0381, 0.1926),
        (0, 10, 0, 20, -0.1611, 0.2775),
        (0, 10, 0, 10, -0.2775, 0.2775),
        (10, 10, 0, 20, 0.6791, 1.0000),
        (10, 10, 0, 10, 0.6075, 1.0000),
    ]

    @Test(arguments: StatisticsPaperExamples.newcombeTableII)
    func newcombeMethod10(_ successes1: Int, _ trials1: Int, _ successes2: Int, _ trials2: Int, _ low: Double, _ high: Double) throws {
        let interval = try #require(Statistics.newcombe(successes1: successes1, trials1: trials1,
                                                         successes2: successes2, trials2: trials2, confidence: 0.95))
        #expect(interval.difference == Double(successes1) / Double(trials1) - Double(successes2) / Double(trials2))
        #expect(roundsTo(interval.low, low), "low \(interval.low)")
        #expect(roundsTo(interval.high, high), "high \(interval.high)")
    }

    /// Newcombe R. G. (1998), "Two-sided confidence intervals for the single
    /// proportion: comparison of seven methods", Statistics in Medicine
    /// 17:857–872, method 3 (Wilson's score interval), at 95%.
    static let newcombeSingleProportion: [(Int, Int, Double, Double)] = [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0000, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ]

    @Test(arguments: StatisticsPaperExamples.newcombeSingleProportion)
    func wilsonMethod3(_ successes: Int, _ trials: Int, _ low: Double, _ high: Double) throws {
        let interval = try #require(Statistics.wilson(successes: successes, trials: trials, confidence: 0.95))
        #expect(roundsTo(interval.low, low), "low \(interval.low)")
        #expect(roundsTo(interval.high, high), "high \(interval.high)")
    }
}

/// Values computed by scipy 1.17.1 and statsmodels 0.15.0 (printed with
/// `repr`), which the Swift functions must meet to 1e-9 relative; counts and
/// degrees of freedom exactly.
@Suite struct StatisticsGoldenValues {
    /// `scipy.stats.norm.ppf(p)`.
    static let quantiles: [(Double, Double)] = [
        (0.975, 1.959963984540054),
        (0.995, 2.5758293035489004),
        (1e-10, -6.361340902404056),
        (0.5, 0.0),
        (0.025, -1.9599639845400545),
        (1e-300, -37.0470962993612),
        (0.9, 1.2815515655446004),
    ]

    @Test(arguments: StatisticsGoldenValues.quantiles)
    func normalQuantile(_ p: Double, _ z: Double) {
        #expect(agrees(Statistics.Normal.quantile(p), z))
    }

    /// `scipy.stats.norm.isf(q)`.
    @Test(arguments: [(0.025, 1.9599639845400545), (0.005, 2.575829303548901), (1e-20, 9.262340089798409)])
    func normalInverseSurvival(_ q: Double, _ z: Double) {
        #expect(agrees(Statistics.Normal.inverseSurvival(q), z))
    }

    /// `scipy.stats.norm.sf(z)` and `scipy.stats.norm.cdf(z)`, far into the upper tail.
    static let normalTails: [(Double, Double, Double)] = [
        (0.0, 0.5, 0.5),
        (1.959963984540054, 0.025, 0.975),
        (5.0, 2.866515718791933e-07, 0.9999997133484281),
        (10.0, 7.61985302416047e-24, 1.0),
        (30.0, 4.906713927147908e-198, 1.0),
        (-2.0, 0.9772498680518208, 0.022750131948179195),
    ]

    @Test(arguments: StatisticsGoldenValues.normalTails)
    func normalSurvivalAndCDF(_ z: Double, _ survival: Double, _ cdf: Double) {
        #expect(agrees(Statistics.Normal.survival(z), survival))
        #expect(agrees(Statistics.Normal.cdf(z), cdf))
    }

    /// `scipy.stats.chi2.sf(x, k)`, down to p-values of 1e-214 (relative, not absolute, agreement).
    static let chiSquaredTails: [(Double, Int, Double)] = [
        (3.841458820694124, 1, 0.04999999999999989),
        (1.0, 1, 0.31731050786291115),
        (0.5, 2, 0.7788007830714049),
        (10.0, 3, 0.01856613546304325),
        (273.11466942148763, 2, 4.9420037625067436e-60),
        (100.0, 10, 5.4497019829205215e-17),
        (950.0, 1, 1.3266104058071073e-208),
        (1000.0, 5, 6.0100776879208495e-214),
        (0.001, 1, 0.9747728793699604),
        (25.0, 30, 0.7250318841806004),
        (5.0, 4, 0.2872974951836458),
        (2.0, 1, 0.15729920705028105),
    ]

    @Test(arguments: StatisticsGoldenValues.chiSquaredTails)
    func chiSquaredSurvival(_ x: Double, _ k: Int, _ p: Double) {
        #expect(agrees(Statistics.ChiSquared.survival(x, degreesOfFreedom: k), p))
    }

    /// `proportion_confint(count, nobs, alpha=1-confidence, method="wilson")`.
    static let wilsonIntervals: [(Int, Int, Double, Double, Double)] = [
        (81, 263, 0.95, 0.2552885198782742, 0.36620957698280004),
        (50, 1000, 0.95, 0.03813026239274882, 0.06531382024425081),
        (270, 4500, 0.9, 0.0544369478584653, 0.06609181828371896),
        (3, 10, 0.99, 0.07956631652306573, 0.6799753207988974),
        (12345, 9_876_543, 0.95, 0.0012280892098448346, 0.0012721613185243783),
        (0, 20, 0.95, 0.0, 0.16112515805281938),
        (29, 29, 0.95, 0.8830302015002593, 1.0),
        (1, 1, 0.8, 0.3784475032253529, 1.0),
    ]

    @Test(arguments: StatisticsGoldenValues.wilsonIntervals)
    func wilson(_ successes: Int, _ trials: Int, _ confidence: Double, _ low: Double, _ high: Double) throws {
        let interval = try #require(Statistics.wilson(successes: successes, trials: trials, confidence: confidence))
        #expect(agrees(interval.low, low))
        #expect(agrees(interval.high, high))
    }

    /// `confint_proportions_2indep(c1, n1, c2, n2, method="newcomb", compare="diff", alpha=1-confidence)`,
    /// with the difference c1/n1 − c2/n2.
    static let newcombeIntervals: [(Int, Int, Int, Int, Double, Double, Double, Double)] = [
        (270, 4500, 50, 1000, 0.95, 0.009999999999999995, -0.006663928853975119, 0.02394600446892613),
        (12345, 9_876_543, 1200, 1_000_000, 0.99, 4.9931276561039715e-05, -4.694120168356286e-05, 0.00014071555778582244),
        (0, 500, 3, 500, 0.9, -0.006, -0.014917018768093458, 0.0004747922706099441),
        (7, 3000, 7, 3000, 0.95, 0.0, -0.002752137517897776, 0.002752137517897776),
    ]

    @Test(arguments: StatisticsGoldenValues.newcombeIntervals)
    func newcombe(_ successes1: Int, _ trials1: Int, _ successes2: Int, _ trials2: Int, _ confidence: Double,
                  _ difference: Double, _ low: Double, _ high: Double) throws {
        let interval = try #require(Statistics.newcombe(successes1: successes1, trials1: trials1,
                                                         successes2: successes2, trials2: trials2, confidence: confidence))
        #expect(agrees(interval.difference, difference))
        #expect(agrees(interval.low, low))
        #expect(agrees(interval.high, high))
    }

    /// `proportions_ztest(count=[c1, c2], nobs=[n1, n2])`: (z, two-sided p-value).
    static let zTests: [(Int, Int, Int, Int, Double, Double)] = [
        (270, 4500, 50, 1000, 1.2219339535640155, 0.2217326042281168),
        (5, 83, 12, 99, -1.4078304151258787, 0.15918129181156992),
        (12345, 9_876_543, 1200, 1_000_000, 1.3491375657596894, 0.17729278409330373),
        (0, 4500, 50, 1000, -15.068650244248364, 2.6037827261340497e-51),
        (10, 100, 10, 100, 0.0, 1.0),
    ]

    @Test(arguments: StatisticsGoldenValues.zTests)
    func twoProportionZTest(_ successes1: Int, _ trials1: Int, _ successes2: Int, _ trials2: Int, _ z: Double, _ p: Double) throws {
        let test = try #require(Statistics.twoProportionZTest(successes1: successes1, trials1: trials1,
                                                               successes2: successes2, trials2: trials2))
        #expect(agrees(test.z, z))
        #expect(agrees(test.pValue, p))
    }

    /// `chi2_contingency(table, correction=False)`: groups × [converted, not converted].
    static let contingencyTables: [([[Int]], Double, Int, Double)] = [
        ([[50, 950], [270, 4230], [300, 4200]], 4.470733888162872, 2, 0.1069528769265596),
        ([[5, 78], [12, 87]], 1.9819864777535043, 1, 0.15918129181156587),
        ([[12345, 9_864_198], [1200, 998_800], [15000, 9_000_000]], 604.210336768473, 2, 6.271803112023911e-132),
    ]

    @Test(arguments: StatisticsGoldenValues.contingencyTables)
    func chiSquaredIndependence(_ table: [[Int]], _ statistic: Double, _ degreesOfFreedom: Int, _ p: Double) throws {
        let test = try #require(Statistics.chiSquaredIndependence(table))
        #expect(agrees(test.statistic, statistic))
        #expect(test.degreesOfFreedom == degreesOfFreedom)
        #expect(agrees(test.pValue, p))
    }

    /// Two groups: the chi-squared test without correction is the pooled z-test squared.
    @Test func chiSquaredOfTwoGroupsIsZSquared() throws {
        let z = try #require(Statistics.twoProportionZTest(successes1: 5, trials1: 83, successes2: 12, trials2: 99))
        let chi = try #require(Statistics.chiSquaredIndependence([[5, 78], [12, 87]]))
        #expect(agrees(chi.statistic, z.z * z.z, relative: 1e-12))
        #expect(agrees(chi.pValue, z.pValue, relative: 1e-9))
    }

    /// `chisquare(observed, [total * w / sum(weights) for w in weights])`, the planned split 45/45/10.
    static let goodnessOfFitCases: [([Int], [Double], Double, Double)] = [
        ([1010, 4480, 4510], [45, 45, 10], 15026.877777777778, 0.0),
        ([4480, 4510, 1010], [45, 45, 10], 0.21111111111111114, 0.8998244812091836),
        ([4500, 4500, 1000], [45, 45, 10], 0.0, 1.0),
        ([5000, 4000, 1000], [45, 45, 10], 111.11111111111111, 7.456392881248831e-25),
        ([50, 30], [1, 1], 5.0, 0.025347318677468325),
    ]

    @Test(arguments: StatisticsGoldenValues.goodnessOfFitCases)
    func goodnessOfFit(_ observed: [Int], _ weights: [Double], _ statistic: Double, _ p: Double) throws {
        let test = try #require(Statistics.goodnessOfFit(observed: observed, weights: weights))
        #expect(agrees(test.statistic, statistic))
        #expect(test.degreesOfFreedom == observed.count - 1)
        #expect(agrees(test.pValue, p))
    }
}

/// Where the statistics are undefined they are nil, and at the boundaries
/// (no conversions, all conversions) they are what statsmodels gives.
@Suite struct StatisticsEdgeCases {
    @Test func noTrialsHasNoInterval() {
        #expect(Statistics.proportion(successes: 0, trials: 0) == nil)
        #expect(Statistics.wilson(successes: 0, trials: 0, confidence: 0.95) == nil)
        #expect(Statistics.newcombe(successes1: 0, trials1: 0, successes2: 1, trials2: 10, confidence: 0.95) == nil)
        #expect(Statistics.newcombe(successes1: 1, trials1: 10, successes2: 0, trials2: 0, confidence: 0.95) == nil)
        #expect(Statistics.twoProportionZTest(successes1: 0, trials1: 0, successes2: 1, trials2: 10) == nil)
    }

    @Test func impossibleCountsAndConfidencesAreRejected() {
        #expect(Statistics.wilson(successes: 11, trials: 10, confidence: 0.95) == nil)
        #expect(Statistics.wilson(successes: -1, trials: 10, confidence: 0.95) == nil)
        #expect(Statistics.wilson(successes: 1, trials: 10, confidence: 1) == nil)
        #expect(Statistics.wilson(successes: 1, trials: 10, confidence: 0) == nil)
        #expect(Statistics.Normal.quantile(0) == nil)
        #expect(Statistics.Normal.quantile(1) == nil)
        #expect(Statistics.Normal.quantile(.nan) == nil)
        #expect(Statistics.ChiSquared.survival(1, degreesOfFreedom: 0) == nil)
    }

    /// No successes: the lower bound is 0 and the upper one crit²/(n + crit²).
    @Test func noSuccesses() throws {
        let interval = try #require(Statistics.wilson(successes: 0, trials: 20, confidence: 0.95))
        #expect(interval.low == 0)
        #expect(agrees(interval.high, 0.16112515805281938))
    }

    /// All successes: the upper bound is 1, clipped as statsmodels clips it.
    @Test func allSuccesses() throws {
        let interval = try #require(Statistics.wilson(successes: 29, trials: 29, confidence: 0.95))
        #expect(interval.high == 1)
        #expect(agrees(interval.low, 0.8830302015002593))
    }

    /// A pooled rate of 0 or 1 leaves the z-test without a variance (statsmodels: nan).
    @Test func zTestWithoutVarianceIsNil() {
        #expect(Statistics.twoProportionZTest(successes1: 0, trials1: 100, successes2: 0, trials2: 50) == nil)
        #expect(Statistics.twoProportionZTest(successes1: 100, trials1: 100, successes2: 50, trials2: 50) == nil)
    }

    /// A column (nobody converted) or a row (an empty group) of zeros has an
    /// expected count of 0, where scipy raises.
    @Test func chiSquaredWithAZeroColumnOrRowIsNil() {
        #expect(Statistics.chiSquaredIndependence([[0, 100], [0, 200]]) == nil)
        #expect(Statistics.chiSquaredIndependence([[5, 95], [0, 0]]) == nil)
        #expect(Statistics.chiSquaredIndependence([]) == nil)
        #expect(Statistics.chiSquaredIndependence([[1, 2], [3]]) == nil)
        #expect(Statistics.chiSquaredIndependence([[1, -2], [3, 4]]) == nil)
    }

    /// One group: 0 degrees of freedom, statistic 0 and p-value 1, as scipy returns.
    @Test func chiSquaredOfOneGroupIsDegenerate() throws {
        let test = try #require(Statistics.chiSquaredIndependence([[5, 95]]))
        #expect(test.statistic == 0)
        #expect(test.degreesOfFreedom == 0)
        #expect(test.pValue == 1)
    }

    @Test func goodnessOfFitNeedsTwoGroupsCountsAndPositiveWeights() {
        #expect(Statistics.goodnessOfFit(observed: [10], weights: [1]) == nil)
        #expect(Statistics.goodnessOfFit(observed: [0, 0], weights: [1, 1]) == nil)
        #expect(Statistics.goodnessOfFit(observed: [10, 10], weights: [1, 0]) == nil)
        #expect(Statistics.goodnessOfFit(observed: [10, 10], weights: [1, -1]) == nil)
        #expect(Statistics.goodnessOfFit(observed: [10, 10], weights: [1]) == nil)
    }

    @Test func chiSquaredSurvivalAtAndBelowZeroIsOne() {
        #expect(Statistics.ChiSquared.survival(0, degreesOfFreedom: 1) == 1)
        #expect(Statistics.ChiSquared.survival(-3, degreesOfFreedom: 2) == 1)
    }

    /// The lift over a baseline of 0 is undefined.
    @Test func relativeLift() {
        #expect(Statistics.relativeLift(rate: 0.06, baseline: 0) == nil)
        #expect(agrees(Statistics.relativeLift(rate: 0.06, baseline: 0.05), (0.06 - 0.05) / 0.05))
        #expect(Statistics.relativeLift(rate: 0, baseline: 0.05) == -1)
    }
}
