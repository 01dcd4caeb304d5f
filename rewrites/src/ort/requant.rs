//! QLinearConv / QLinearMatMul / QGemm: integer accumulation and requantization.
