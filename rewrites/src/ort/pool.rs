//! QLinearAveragePool / QLinearGlobalAveragePool.
