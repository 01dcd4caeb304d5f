//! lookup-table kernels: QLinearSigmoid, QLinearLeakyRelu, QLinearWhere, QLinearConcat.
